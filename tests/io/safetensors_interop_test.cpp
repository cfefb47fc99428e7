// Interoperability with the Python `safetensors` package, both directions. The tensors and
// their formulas mirror reference_tensors() in tests/reference/io_safetensors_interop.py.
// Every value is exactly representable in its dtype, so all comparisons are exact.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>

#include "core/dtype.h"
#include "io/checkpoint_dir.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

namespace lt {
namespace {

// Owns the bytes of the reference tensors.
struct ReferenceTensors {
  std::map<std::string, std::vector<uint8_t>> bytes;
  std::vector<NamedTensor> tensors;

  template <typename T, typename F>
  void add(const std::string& name, DType dt, Shape shape, F value) {
    const int64_t n = shape_numel(shape);
    std::vector<uint8_t>& b = bytes[name];
    b.resize(n * sizeof(T));
    for (int64_t i = 0; i < n; ++i) {
      T v = value(i);
      std::memcpy(b.data() + i * sizeof(T), &v, sizeof(T));
    }
    tensors.push_back({name, TensorView{b.data(), dt, shape}});
  }

  ReferenceTensors() {
    add<double>("f64", DType::F64, {7}, [](int64_t i) { return i / 3.0; });
    add<float>("f32", DType::F32, {3, 5}, [](int64_t i) { return i * 0.5f - 3.0f; });
    add<bf16>("bf16", DType::BF16, {4, 4}, [](int64_t i) { return f32_to_bf16((i - 8) * 0.25f); });
    // fp16 of i/8 for i < 6: sign 0, exponent and mantissa from the IEEE half layout.
    add<uint16_t>("f16", DType::F16, {2, 3}, [](int64_t i) -> uint16_t {
      static const uint16_t kHalf[] = {0x0000, 0x3000, 0x3400, 0x3600, 0x3800, 0x3900};
      return kHalf[i];
    });
    add<int64_t>("i64", DType::I64, {2, 2}, [](int64_t i) { return i * 1000000007 - 5; });
    add<int32_t>("i32", DType::I32, {5}, [](int64_t i) { return static_cast<int32_t>(i * -7); });
    add<int16_t>("i16", DType::I16, {3}, [](int64_t i) { return static_cast<int16_t>(i * 300 - 1); });
    add<int8_t>("i8", DType::I8, {6}, [](int64_t i) { return static_cast<int8_t>(i - 3); });
    add<uint8_t>("u8", DType::U8, {3}, [](int64_t i) { return static_cast<uint8_t>(i * 80); });
    add<uint8_t>("bool", DType::BOOL, {4}, [](int64_t i) { return static_cast<uint8_t>(i % 2); });
    add<float>("empty", DType::F32, {0, 3}, [](int64_t) { return 0.0f; });
    add<float>("model.layers.0.self_attn.q_proj.weight", DType::F32, {4, 3}, [](int64_t i) { return i * 0.5f; });
  }
};

TEST(SafetensorsInterop, HalfTableMatchesConverter) {
  ReferenceTensors ref;
  const auto& b = ref.bytes.at("f16");
  for (int i = 0; i < 6; ++i) {
    uint16_t h;
    std::memcpy(&h, b.data() + 2 * i, 2);
    EXPECT_EQ(f16_to_f32(h), i * 0.125f) << i;
  }
}

TEST(SafetensorsInterop, ReadsFileWrittenByPython) {
  test::TempDir dir("st-interop-read");
  const std::string path = dir.str() + "/py.safetensors";
  auto r = test::run_reference_script("io_safetensors_interop.py", "write '" + path + "'");
  ASSERT_PYTHON_OK(r);

  SafetensorsFile f(path);
  ReferenceTensors ref;
  ASSERT_EQ(f.size(), ref.tensors.size());
  EXPECT_EQ(f.metadata().at("source"), "python");
  for (const auto& t : ref.tensors) {
    SCOPED_TRACE(t.name);
    TensorView v = f.tensor(t.name);
    EXPECT_EQ(v.dtype, t.view.dtype);
    EXPECT_EQ(v.shape, t.view.shape);
    ASSERT_EQ(v.bytes(), t.view.bytes());
    EXPECT_EQ(std::memcmp(v.data, t.view.data, v.bytes()), 0);
  }
}

TEST(SafetensorsInterop, PythonReadsFileWrittenByCpp) {
  test::TempDir dir("st-interop-write");
  const std::string path = dir.str() + "/cpp.safetensors";
  ReferenceTensors ref;
  save_safetensors(path, ref.tensors, {{"source", "cpp"}});
  auto r = test::run_reference_script("io_safetensors_interop.py", "verify '" + path + "'");
  ASSERT_PYTHON_OK(r);
}

TEST(SafetensorsInterop, PythonReadsShardedCheckpointWrittenByCpp) {
  test::TempDir dir("st-interop-sharded");
  ReferenceTensors ref;
  // 64-byte shards: the reference tensors (8 to 60 bytes each) need several.
  auto files = save_safetensors_sharded(dir.str(), ref.tensors, 64);
  ASSERT_GT(files.size(), 2u);
  auto r = test::run_reference_script("io_safetensors_interop.py", "verify_sharded '" + dir.str() + "'");
  ASSERT_PYTHON_OK(r);
  CheckpointDir ckpt(dir.str());
  EXPECT_EQ(ckpt.names().size(), ref.tensors.size());
}

}  // namespace
}  // namespace lt
