// MasterPages (train/master_pages.h): what is released is exactly the projection
// matrices' page-aligned interiors of the chosen layers, and the slot holds each of those
// matrices whole (as the pages covering it, where in_slot says); released pages read as
// zeros, the slot's copy written back restores them bit for bit, and nothing else in the
// block ever changes.
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
  std::vector<AlignedBuffer<std::byte>> slots;
  for (int j : layers) {
    size_t bytes = 0, slot = 0;
    float* at = params.block_base(j);
    for (const BlockField& f : block_fields(c, j)) {
      const auto t = reinterpret_cast<uintptr_t>(at), e = reinterpret_cast<uintptr_t>(at + f.numel);
      size_t whole = 0;
      for (int64_t i = 0; f.matrix && i < f.numel; ++i) {
        const auto a = reinterpret_cast<uintptr_t>(at + i);
        if (a / page * page >= t && (a / page + 1) * page <= e) {
          paged[static_cast<size_t>(at + i - params.data())] = true;
          whole += sizeof(float);
        }
      }
      bytes += whole;
      if (whole > 0) slot += (e + page - 1) / page * page - t / page * page;  // the pages it touches
      at += f.numel;
    }
    EXPECT_EQ(pages.bytes(j), bytes) << "layer " << j;
    EXPECT_EQ(pages.slot_bytes(j), slot) << "layer " << j;
    EXPECT_LE(pages.slot_bytes(j), pages.max_slot_bytes());
    ASSERT_GT(bytes, 0u) << "layer " << j << " has no whole page inside a matrix";
    // The slot holds each paged matrix whole, where in_slot() says; the rest is not its.
    slots.emplace_back(pages.slot_bytes(j));
    const std::span<std::byte> part{slots.back().data(), slots.back().size()};
    pages.copy_out(j, part);
    at = params.block_base(j);
    for (const BlockField& f : block_fields(c, j)) {
      const float* in = pages.in_slot(j, part, at);
      const bool pages_it = f.matrix && page_interior(at, static_cast<size_t>(f.numel) * sizeof(float)).bytes > 0;
      const int64_t where = at - params.data();
      EXPECT_EQ(in != nullptr, pages_it) << "layer " << j << ", tensor at " << where;
      if (in) {
        EXPECT_EQ(std::memcmp(in, at, static_cast<size_t>(f.numel) * sizeof(float)), 0) << "tensor at " << where;
      }
      at += f.numel;
    }
    pages.release(j);
  }
  for (int64_t i = 0; i < params.numel(); ++i) {
    const float want = paged[static_cast<size_t>(i)] ? 0.0f : before[static_cast<size_t>(i)];
    ASSERT_EQ(std::memcmp(&params.data()[i], &want, sizeof(float)), 0)
        << "element " << i << (paged[static_cast<size_t>(i)] ? " was not released" : " changed without paging");
  }
  for (size_t k = 0; k < layers.size(); ++k) pages.copy_in(layers[k], {slots[k].data(), slots[k].size()});
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
