// Fuzz target: the optimizer state file, optimizer.bin of a checkpoint
// (optim/adamw_state_file.cpp: AdamW::load(path) and AdamW::load(path, pager)).
//
// The optimizer registers four tensors, as a trainer would: "embed" (64, fp32 state kept),
// "w" (64, 8-bit), "paged" (48, 8-bit, state paged by the caller) and "norm" (8, fp32),
// with block size 16 (min_8bit_numel 32).
// Input: byte 0 picks the mode, the rest is the file.
//   bit 0: the harness appends the trailer itself (the FNV-1a hash of the rest, then
//          "LTADEND."), so mutations inside the file are not all stopped by the checksum;
//   bit 1: load through a pager (two passes) instead of load(path).
// On success every tensor takes one optimizer step from the loaded state (the decoded
// 8-bit state meets the kernels).
// Seeds: LT_FUZZ_WRITE_SEEDS=DIR ./adamw_state_fuzz -runs=0 writes the state files the
// project's own AdamW::save makes (fresh, and after a step) into DIR.
// Finding: any crash, ASan/UBSan report, leak, hang, LT_ASSERT, or an exception other
// than lt::Error (fuzz_util.h).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "fuzz_util.h"
#include "optim/adamw.h"

namespace {

constexpr int64_t kSizes[4] = {64, 64, 48, 8};

struct Optimizer {
  lt::AdamW adamw;
  lt::AlignedBuffer<std::byte> paged_storage;
  explicit Optimizer(const lt::AdamWConfig& c) : adamw(c) {}
};

lt::AdamWConfig config() {
  lt::AdamWConfig c;
  c.block_size = 16;
  c.min_8bit_numel = 32;
  c.num_threads = 1;
  return c;
}

std::unique_ptr<Optimizer> make_optimizer() {
  auto o = std::make_unique<Optimizer>(config());
  lt::AdamWTensorOptions keep;
  keep.keep_fp32 = true;
  lt::AdamWTensorOptions paged;
  paged.paged = true;
  o->adamw.add_tensor("embed", kSizes[0], keep);
  o->adamw.add_tensor("w", kSizes[1]);
  o->adamw.add_tensor("paged", kSizes[2], paged);
  o->adamw.add_tensor("norm", kSizes[3], {false, 0.f, false});
  o->paged_storage.resize(o->adamw.state_bytes(2));
  o->adamw.attach_state(2, o->paged_storage.data());
  return o;
}

void step_all(lt::AdamW& a) {
  std::vector<float> param(64), grad(64);
  for (int i = 0; i < 64; ++i) {
    param[i] = 0.01f * static_cast<float>(i - 30);
    grad[i] = 0.001f * static_cast<float>((i * 7) % 13 - 6);
  }
  for (int id = 0; id < a.num_tensors(); ++id)
    (void)a.step_tensor(id, param.data(), grad.data(), nullptr, 1e-3f, 1.f, 2);
}

void append_trailer(std::string& file) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char b : file) h = (h ^ b) * 0x100000001b3ull;
  file.append(reinterpret_cast<const char*>(&h), 8);
  file.append("LTADEND.", 8);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("LT_FUZZ_WRITE_SEEDS")) {
    auto o = make_optimizer();
    o->adamw.save(std::string(dir) + "/fresh.bin");
    step_all(o->adamw);
    o->adamw.save(std::string(dir) + "/stepped.bin");
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  std::string file(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode & 1) append_trailer(file);
  const std::string path = lt::fuzz::scratch().write("optimizer.bin", file);
  auto o = make_optimizer();
  lt::fuzz::expect_only_lt_error([&] {
    if (mode & 2) {
      lt::AlignedBuffer<std::byte> staged(o->adamw.state_bytes(2));
      o->adamw.detach_state(2);
      lt::AdamWStatePager pager;
      pager.page_in = [&](int id) { o->adamw.attach_state(id, staged.data()); };
      pager.page_out = [&](int id, bool modified) {
        if (modified) std::memcpy(o->paged_storage.data(), staged.data(), staged.size());
        o->adamw.detach_state(id);
      };
      struct Reattach {
        Optimizer& o;
        ~Reattach() { o.adamw.attach_state(2, o.paged_storage.data()); }
      } reattach{*o};
      o->adamw.load(path, pager);
    } else {
      o->adamw.load(path);
    }
    step_all(o->adamw);
  });
  return 0;
}
