// State save/load: bit-exact round trip (the next step after a reload equals the next step
// without one), and clear errors for truncated, corrupt or mismatched files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "adamw_test_util.h"
#include "core/error.h"
#include "optim/adamw.h"
#include "test_util.h"

namespace lt {
namespace {

// Tensors of both formats: 8-bit (with a partial block), small fp32, user-kept fp32.
AdamW make_optimizer() {
  AdamW opt;
  opt.add_tensor("layers.0.w", 4097);
  opt.add_tensor("layers.0.norm", 22);
  AdamWTensorOptions keep;
  keep.keep_fp32 = true;
  opt.add_tensor("embed", 5000, keep);
  return opt;
}

TEST(AdamWStateFile, RoundTripIsBitExact) {
  test::TempDir dir("adamw-state");
  const std::string path = dir.str() + "/optim.bin";
  AdamW a = make_optimizer();
  auto pa = test::init_params(a);
  test::train_all(a, pa, 1, 3);
  a.save(path);

  AdamW b = make_optimizer();
  b.load(path);
  for (int id = 0; id < a.num_tensors(); ++id) EXPECT_EQ(test::snapshot(a, id), test::snapshot(b, id)) << a.name(id);
  // Continuing from the loaded state gives the bits of continuing from the original.
  auto pb = pa;
  test::train_all(a, pa, 4, 5);
  test::train_all(b, pb, 4, 5);
  for (int id = 0; id < a.num_tensors(); ++id) {
    EXPECT_TRUE(test::same_bits(pa[id], pb[id])) << a.name(id);
    EXPECT_EQ(test::snapshot(a, id), test::snapshot(b, id)) << a.name(id);
  }
}

TEST(AdamWStateFile, BadFilesThrowAndKeepState) {
  test::TempDir dir("adamw-state-bad");
  const std::string path = dir.str() + "/optim.bin";
  AdamW a = make_optimizer();
  auto pa = test::init_params(a);
  test::train_all(a, pa, 1, 2);
  a.save(path);
  const auto size = std::filesystem::file_size(path);
  std::vector<char> bytes(size);
  std::ifstream(path, std::ios::binary).read(bytes.data(), size);
  auto write = [&](const std::string& p, const std::vector<char>& b) {
    std::ofstream(p, std::ios::binary).write(b.data(), b.size());
  };

  AdamW b = make_optimizer();
  const test::StateSnapshot before = test::snapshot(b, 0);
  // Truncated anywhere: header, inside a tensor, before the trailer.
  for (size_t cut : {size_t{5}, size_t{40}, size_t(size / 2), size_t(size - 9)}) {
    write(path + ".cut", std::vector<char>(bytes.begin(), bytes.begin() + cut));
    EXPECT_THROW(b.load(path + ".cut"), Error) << "cut at " << cut;
  }
  // One flipped bit in the payload: the checksum catches it.
  auto flipped = bytes;
  flipped[size / 2] ^= 0x10;
  write(path + ".flip", flipped);
  EXPECT_THROW(b.load(path + ".flip"), Error);
  // Extra bytes after the trailer.
  auto longer = bytes;
  longer.push_back('x');
  write(path + ".long", longer);
  EXPECT_THROW(b.load(path + ".long"), Error);
  EXPECT_THROW(b.load(dir.str() + "/missing.bin"), Error);
  EXPECT_EQ(test::snapshot(b, 0), before) << "a failed load changed the state";

  // Mismatched optimizers: other tensor set, other sizes, other format, other block size.
  AdamW fewer;
  fewer.add_tensor("layers.0.w", 4097);
  EXPECT_THROW(fewer.load(path), Error);
  AdamW resized;
  resized.add_tensor("layers.0.w", 4096);
  resized.add_tensor("layers.0.norm", 22);
  resized.add_tensor("embed", 5000, {.keep_fp32 = true});
  EXPECT_THROW(resized.load(path), Error);
  AdamW reformatted;
  reformatted.add_tensor("layers.0.w", 4097);
  reformatted.add_tensor("layers.0.norm", 22);
  reformatted.add_tensor("embed", 5000);  // 8-bit now
  EXPECT_THROW(reformatted.load(path), Error);
  AdamWConfig cfg;
  cfg.block_size = 128;
  AdamW reblocked(cfg);
  reblocked.add_tensor("layers.0.w", 4097);
  reblocked.add_tensor("layers.0.norm", 22);
  reblocked.add_tensor("embed", 5000, {.keep_fp32 = true});
  EXPECT_THROW(reblocked.load(path), Error);
}

// Found by fuzz/adamw_state_fuzz: the error for a mismatched tensor quoted the file's name
// bytes as they were, so a NUL in them cut the message short of its place and fix. They
// are now written as \xHH.
TEST(AdamWStateFile, TensorNameFromTheFileIsPrintable) {
  test::TempDir dir("adamw-state-name");
  const std::string path = dir.str() + "/optim.bin";
  std::string file = "LTADAMW1";
  auto put = [&](const auto& x) { file.append(reinterpret_cast<const char*>(&x), sizeof x); };
  put(uint32_t{1});    // version
  put(uint32_t{3});    // tensors, as make_optimizer registers
  put(uint64_t{256});  // block size (the default)
  const std::string name("a\0\xff\\b", 5);
  put(static_cast<uint32_t>(name.size()));
  file += name;
  put(uint64_t{4097});
  put(uint8_t{1});
  std::ofstream(path, std::ios::binary).write(file.data(), static_cast<std::streamsize>(file.size()));
  AdamW a = make_optimizer();
  try {
    a.load(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tensor 'a\\x00\\xff\\x5cb'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(in " + path + ")"), std::string::npos) << msg;
    EXPECT_NE(msg.find("register the same tensors"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace lt
