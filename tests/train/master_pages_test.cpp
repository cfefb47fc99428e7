// MasterPages (train/master_pages.h): what pages is exactly the projection matrices'
// page-aligned interiors of the chosen layers; released pages read as zeros, the copy
// written back restores them bit for bit, and nothing else in the block ever changes.
#include "train/master_pages.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "core/aligned_buffer.h"
#include "model/checkpoint.h"
#include "model/parameters.h"
#include "../exec/streaming_test_util.h"

namespace lt {
namespace {

void expect_pages_of(const ModelConfig& c, const std::vector<int>& layers) {
  ModelParameters params(c);
  init_parameters(params, 7);
  const std::vector<float> before(params.data(), params.data() + params.numel());
  MasterPages pages(params, layers);

  // Which elements page: a matrix's elements on whole pages inside it, of the chosen layers.
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  std::vector<bool> paged(static_cast<size_t>(params.numel()), false);
  size_t expected_max = 0;
  for (int j : layers) {
    size_t bytes = 0;
    float* at = params.block_base(j);
    for (const BlockField& f : block_fields(c, j)) {
      for (int64_t i = 0; f.matrix && i < f.numel; ++i) {
        const auto a = reinterpret_cast<uintptr_t>(at + i);
        const auto t = reinterpret_cast<uintptr_t>(at), e = reinterpret_cast<uintptr_t>(at + f.numel);
        if (a / page * page >= t && (a / page + 1) * page <= e) {
          paged[static_cast<size_t>(at + i - params.data())] = true;
          bytes += sizeof(float);
        }
      }
      at += f.numel;
    }
    EXPECT_EQ(pages.bytes(j), bytes) << "layer " << j;
    expected_max = std::max(expected_max, bytes);
  }
  ASSERT_GT(expected_max, 0u) << "this model has no whole page inside a matrix";
  EXPECT_EQ(pages.max_bytes(), expected_max);

  std::vector<AlignedBuffer<std::byte>> saved;
  for (int j : layers) {
    saved.emplace_back(pages.bytes(j));
    pages.copy_out(j, {saved.back().data(), saved.back().size()});
    pages.release(j);
  }
  for (int64_t i = 0; i < params.numel(); ++i) {
    const float want = paged[static_cast<size_t>(i)] ? 0.0f : before[static_cast<size_t>(i)];
    ASSERT_EQ(std::memcmp(&params.data()[i], &want, sizeof(float)), 0)
        << "element " << i << (paged[static_cast<size_t>(i)] ? " was not released" : " changed without paging");
  }
  for (size_t k = 0; k < layers.size(); ++k) pages.copy_in(layers[k], {saved[k].data(), saved[k].size()});
  EXPECT_EQ(std::memcmp(params.data(), before.data(), before.size() * sizeof(float)), 0)
      << "paging in did not restore the block";
}

TEST(MasterPages, PageTheMatricesInteriorsOnly) {
  ModelConfig wide = test::streaming_tiny_config(4);
  wide.hidden_size = 128;
  wide.intermediate_size = 512;
  expect_pages_of(wide, {1, 3});
  // A hybrid model: the Gated DeltaNet's matrices page, its convolution and gates stay.
  ModelConfig hybrid = test::qwen3_5_tiny_config({LayerKind::LinearAttention, LayerKind::Attention,
                                                  LayerKind::LinearAttention, LayerKind::Attention});
  hybrid.hidden_size = 128;
  hybrid.intermediate_size = 512;
  expect_pages_of(hybrid, {0, 1, 2, 3});
}

}  // namespace
}  // namespace lt
