// safetensors reader and writer: round trips, layout guarantees, and one test per kind of
// malformed file, each checking that the error names the file and the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

namespace lt {
namespace {

namespace fs = std::filesystem;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file with the given header text and `data_bytes` zero bytes of data.
std::string make_file(const std::string& dir, const std::string& header, size_t data_bytes) {
  const std::string path = dir + "/bad.safetensors";
  write_bytes(path, le64(header.size()) + header + std::string(data_bytes, '\0'));
  return path;
}

// Expects opening `path` to throw an lt::Error whose message names the file and contains
// every one of `parts`.
void expect_open_error(const std::string& path, std::initializer_list<std::string> parts) {
  try {
    SafetensorsFile f(path);
    FAIL() << "no error for " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
}

TEST(Safetensors, RoundTripKeepsBytesShapesDtypesAndMetadata) {
  test::TempDir dir("st-roundtrip");
  std::vector<float> a = {1.f, -2.f, 3.5f, 1e-30f, 7.f, 8.f};
  std::vector<bf16> b = {f32_to_bf16(0.5f), f32_to_bf16(-1.f), f32_to_bf16(3.f)};
  std::vector<int64_t> c = {-1, 1LL << 40};
  std::vector<uint8_t> d = {1, 2, 3};
  const std::string path = dir.str() + "/t.safetensors";
  save_safetensors(path,
                   {{"a", {a.data(), DType::F32, {2, 3}}},
                    {"b", {b.data(), DType::BF16, {3}}},
                    {"c", {c.data(), DType::I64, {2, 1}}},
                    {"d", {d.data(), DType::U8, {3}}},
                    {"empty", {nullptr, DType::F32, {0}}}},
                   {{"step", "12"}});
  SafetensorsFile f(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b", "c", "d", "empty"}));
  EXPECT_EQ(f.metadata().at("step"), "12");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.data_offset() % 8, 0u);
  TensorView va = f.tensor("a");
  EXPECT_EQ(va.dtype, DType::F32);
  EXPECT_EQ(va.shape, (Shape{2, 3}));
  EXPECT_EQ(std::memcmp(va.data, a.data(), 24), 0);
  EXPECT_EQ(std::memcmp(f.tensor("b").data, b.data(), 6), 0);
  EXPECT_EQ(f.tensor("c").shape, (Shape{2, 1}));
  EXPECT_EQ(std::memcmp(f.tensor("c").data, c.data(), 16), 0);
  EXPECT_EQ(std::memcmp(f.tensor("d").data, d.data(), 3), 0);
  EXPECT_EQ(f.tensor("empty").numel(), 0);
  // Sorted by element size, so each tensor is aligned to its dtype within the mapping.
  for (const auto& n : f.names()) {
    TensorView v = f.tensor(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % dtype_size(v.dtype), 0u) << n;
  }
}

TEST(Safetensors, OutputDoesNotDependOnInputOrder) {
  test::TempDir dir("st-deterministic");
  std::vector<float> a = {1, 2};
  std::vector<uint16_t> b = {3, 4, 5};
  const TensorView va{a.data(), DType::F32, {2}}, vb{b.data(), DType::BF16, {3}};
  save_safetensors(dir.str() + "/1", {{"x", va}, {"y", vb}});
  save_safetensors(dir.str() + "/2", {{"y", vb}, {"x", va}});
  auto read = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(read(dir.str() + "/1"), read(dir.str() + "/2"));
}

TEST(Safetensors, WriterRejectsDuplicateAndReservedNames) {
  test::TempDir dir("st-names");
  float x = 1;
  const TensorView v{&x, DType::F32, {1}};
  const std::string path = dir.str() + "/t.safetensors";
  EXPECT_THROW(save_safetensors(path, {{"w", v}, {"w", v}}), Error);
  EXPECT_THROW(save_safetensors(path, {{"__metadata__", v}}), Error);
  EXPECT_FALSE(fs::exists(path));
}

TEST(Safetensors, WriteIntoMissingDirectoryNamesThePath) {
  const std::string path = "/nonexistent-lazytrain-dir/t.safetensors";
  float x = 1;
  try {
    save_safetensors(path, {{"w", {&x, DType::F32, {1}}}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// --- malformed files: one test per problem --------------------------------------------

TEST(SafetensorsMalformed, FileShorterThanHeaderLength) {
  test::TempDir dir("st-short");
  const std::string path = dir.str() + "/short.safetensors";
  write_bytes(path, "abc");
  expect_open_error(path, {"3 bytes", "shorter than the 8-byte header length"});
}

TEST(SafetensorsMalformed, HeaderLengthPastEndOfFile) {
  test::TempDir dir("st-hlen");
  const std::string path = dir.str() + "/hlen.safetensors";
  write_bytes(path, le64(1000) + "{}");
  expect_open_error(path, {"header length 1000", "past the end of the file"});
}

TEST(SafetensorsMalformed, TruncatedDataSection) {
  test::TempDir dir("st-trunc");
  std::vector<float> a(64, 1.f);
  const std::string path = dir.str() + "/t.safetensors";
  save_safetensors(path, {{"w", {a.data(), DType::F32, {64}}}});
  fs::resize_file(path, fs::file_size(path) - 10);
  expect_open_error(path, {"'w'", "past the end of the data section", "truncated"});
}

TEST(SafetensorsMalformed, BadJson) {
  test::TempDir dir("st-json");
  expect_open_error(make_file(dir.str(), "{\"w\": {\"dtype\": ", 0), {"not valid JSON"});
}

TEST(SafetensorsMalformed, HeaderNotAnObject) {
  test::TempDir dir("st-array");
  expect_open_error(make_file(dir.str(), "[1, 2]", 0), {"not a JSON object"});
}

TEST(SafetensorsMalformed, UnknownDtype) {
  test::TempDir dir("st-dtype");
  expect_open_error(make_file(dir.str(), R"({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}})", 2),
                    {"'w'", "unknown dtype \"F8_E4M3\""});
}

TEST(SafetensorsMalformed, ShapeDoesNotMatchByteSpan) {
  test::TempDir dir("st-span");
  expect_open_error(make_file(dir.str(), R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 24),
                    {"'w'", "span 20 bytes", "[2, 3]", "needs 24"});
}

TEST(SafetensorsMalformed, OffsetsOutOfRange) {
  test::TempDir dir("st-range");
  expect_open_error(make_file(dir.str(), R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", 16),
                    {"'w'", "[8,24]", "past the end of the data section"});
}

TEST(SafetensorsMalformed, OffsetsReversed) {
  test::TempDir dir("st-reversed");
  expect_open_error(make_file(dir.str(), R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [8, 4]}})", 16),
                    {"'w'", "begin after they end"});
}

TEST(SafetensorsMalformed, NegativeShape) {
  test::TempDir dir("st-negshape");
  expect_open_error(make_file(dir.str(), R"({"w": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}})", 0),
                    {"'w'", "non-negative"});
}

TEST(SafetensorsMalformed, MissingField) {
  test::TempDir dir("st-missing");
  expect_open_error(make_file(dir.str(), R"({"w": {"dtype": "U8", "shape": [1]}})", 1), {"'w'", "data_offsets"});
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  test::TempDir dir("st-overlap");
  expect_open_error(make_file(dir.str(),
                              R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                  "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                              24),
                    {"'b'", "overlap tensor 'a'"});
}

TEST(SafetensorsMalformed, MetadataValueNotString) {
  test::TempDir dir("st-meta");
  expect_open_error(make_file(dir.str(), R"({"__metadata__": {"step": 3}})", 0), {"__metadata__", "step"});
}

TEST(SafetensorsMalformed, MissingFileNamesThePath) {
  expect_open_error("/nonexistent-lazytrain/x.safetensors", {"cannot open"});
}

// Found by fuzz/safetensors_header_fuzz: nlohmann reports a number too large for a double
// as out_of_range, not parse_error, and that escaped the reader as a non-lt::Error.
TEST(SafetensorsMalformed, NumberTooLargeForADouble) {
  test::TempDir dir("st-1e400");
  expect_open_error(make_file(dir.str(), R"({"w": {"dtype": "U8", "shape": [1e400], "data_offsets": [0, 0]}})", 0),
                    {"not valid JSON", "1e400"});
}

// After a 0 dimension the product stays 0, so each dimension needs its own bound: 2^63
// would have become a negative dimension.
TEST(SafetensorsMalformed, DimensionPastInt64AfterAZero) {
  test::TempDir dir("st-hugedim");
  expect_open_error(
      make_file(dir.str(), R"({"w": {"dtype": "U8", "shape": [0, 9223372036854775808], "data_offsets": [0, 0]}})", 0),
      {"'w'", "too many elements"});
}

TEST(Safetensors, MissingTensorLookupNamesFileAndTensor) {
  test::TempDir dir("st-lookup");
  float x = 1;
  const std::string path = dir.str() + "/t.safetensors";
  save_safetensors(path, {{"w", {&x, DType::F32, {1}}}});
  SafetensorsFile f(path);
  EXPECT_FALSE(f.contains("lm_head.weight"));
  try {
    f.tensor("lm_head.weight");
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("no tensor named 'lm_head.weight'"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace lt
