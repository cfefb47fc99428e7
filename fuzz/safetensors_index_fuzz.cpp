// Fuzz target: model.safetensors.index.json (io/checkpoint_dir.h, CheckpointDir), the
// index of a sharded Hugging Face checkpoint.
//
// Input: the index file's bytes. It is written beside two real shards (made once with
// the project's writer, save_safetensors_sharded: model-00001-of-00002.safetensors holds
// "a" and "b", model-00002-of-00002.safetensors holds "c"), so a weight_map that names
// them opens them for real. On success every mapped tensor is looked up and read.
// Finding: any crash, ASan/UBSan report, leak, hang, LT_ASSERT, or an exception other
// than lt::Error (fuzz_util.h).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "fuzz_util.h"
#include "io/checkpoint_dir.h"
#include "io/safetensors_writer.h"

namespace {

void write_shards(const std::string& dir) {
  static float a[4] = {1, 2, 3, 4}, b[2] = {5, 6}, c[6] = {7, 8, 9, 10, 11, 12};
  std::vector<lt::NamedTensor> t = {{"a", {a, lt::DType::F32, {2, 2}}},
                                    {"b", {b, lt::DType::F32, {2}}},
                                    {"c", {c, lt::DType::F32, {3, 2}}}};
  lt::save_safetensors_sharded(dir, t, 24);  // a+b (24 bytes) | c
}

const std::string& shard_dir() {
  static const std::string dir = [] {
    const std::string d = (lt::fuzz::scratch().path() / "sharded").string();
    write_shards(d);
    std::filesystem::remove(std::filesystem::path(d) / lt::kSafetensorsIndexName);
    return d;
  }();
  return dir;
}

}  // namespace

// LT_FUZZ_WRITE_SEEDS=DIR: writes the shards and the index the writer makes into DIR (the
// seeds of this target and of safetensors_header_fuzz; fuzz/make_seeds.py).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("LT_FUZZ_WRITE_SEEDS")) write_shards(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = shard_dir();
  const std::string index = lt::fuzz::ScratchDir::write_at(dir + "/" + lt::kSafetensorsIndexName, data, size);
  lt::fuzz::expect_only_lt_error([&] {
    lt::CheckpointDir ckpt(index);
    volatile float sink = 0;
    for (const std::string& name : ckpt.names()) {
      const lt::TensorView v = ckpt.tensor(name);
      if (v.numel() > 0 && v.dtype == lt::DType::F32) {
        const float* p = static_cast<const float*>(v.data);
        sink = sink + p[0] + p[v.numel() - 1];
      }
    }
    (void)sink;
  });
  return 0;
}
