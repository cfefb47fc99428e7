// Sharded saving and the checkpoint-directory reader (single file or index + shards).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checkpoint_dir.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

namespace lt {
namespace {

namespace fs = std::filesystem;

// Five 1000-byte tensors t0..t4 whose bytes are all equal to their index.
struct FiveTensors {
  std::vector<std::vector<uint8_t>> data;
  std::vector<NamedTensor> tensors;
  FiveTensors() {
    for (int i = 0; i < 5; ++i) data.emplace_back(1000, static_cast<uint8_t>(i));
    for (int i = 0; i < 5; ++i) {
      std::string name = "t";  // (not "t" + to_string: GCC 12 warns falsely on that)
      name += std::to_string(i);
      tensors.push_back({name, {data[i].data(), DType::U8, {10, 100}}});
    }
  }
};

void expect_error(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  try {
    f();
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
}

TEST(CheckpointDir, ShardedRoundTrip) {
  test::TempDir dir("ckpt-sharded");
  FiveTensors five;
  // 2500 bytes per shard: two tensors fit, a third does not -> [t0 t1] [t2 t3] [t4].
  auto files = save_safetensors_sharded(dir.str(), five.tensors, 2500);
  ASSERT_EQ(files, (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                             "model-00003-of-00003.safetensors"}));
  auto index = nlohmann::json::parse(read_text_file(dir.str() + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 5000);
  EXPECT_EQ(index["weight_map"]["t2"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["t4"], "model-00003-of-00003.safetensors");

  CheckpointDir ckpt(dir.str());
  EXPECT_EQ(ckpt.files().size(), 3u);
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"t0", "t1", "t2", "t3", "t4"}));
  for (int i = 0; i < 5; ++i) {
    TensorView v = ckpt.tensor(five.tensors[i].name);
    EXPECT_EQ(v.shape, (Shape{10, 100}));
    EXPECT_EQ(std::memcmp(v.data, five.data[i].data(), 1000), 0) << i;
  }
  EXPECT_NE(ckpt.file_of("t3").path().find("model-00002-of-00003"), std::string::npos);
}

TEST(CheckpointDir, TensorLargerThanShardGetsItsOwnShard) {
  test::TempDir dir("ckpt-big");
  FiveTensors five;
  auto files = save_safetensors_sharded(dir.str(), five.tensors, 10);
  EXPECT_EQ(files.size(), 5u);
  EXPECT_EQ(CheckpointDir(dir.str()).names().size(), 5u);
}

TEST(CheckpointDir, OneShardIsASingleFileAndStaleShardsGo) {
  test::TempDir dir("ckpt-single");
  FiveTensors five;
  save_safetensors_sharded(dir.str(), five.tensors, 2500);
  auto files = save_safetensors_sharded(dir.str(), five.tensors, 1 << 20);
  EXPECT_EQ(files, (std::vector<std::string>{"model.safetensors"}));
  EXPECT_FALSE(fs::exists(dir.path() / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir.path() / "model-00001-of-00003.safetensors"));
  // And back: a sharded save removes the stale single file (which readers would prefer).
  save_safetensors_sharded(dir.str(), five.tensors, 2500);
  EXPECT_FALSE(fs::exists(dir.path() / "model.safetensors"));
  EXPECT_EQ(CheckpointDir(dir.str()).files().size(), 3u);
}

TEST(CheckpointDir, OpensAFileOrAnIndexPathDirectly) {
  test::TempDir dir("ckpt-direct");
  FiveTensors five;
  save_safetensors_sharded(dir.str(), five.tensors, 2500);
  EXPECT_EQ(CheckpointDir(dir.str() + "/model.safetensors.index.json").names().size(), 5u);
  EXPECT_EQ(CheckpointDir(dir.str() + "/model-00001-of-00003.safetensors").names().size(), 2u);
}

TEST(CheckpointDir, MissingTensorNamesDirectoryAndTensor) {
  test::TempDir dir("ckpt-lookup");
  FiveTensors five;
  save_safetensors_sharded(dir.str(), five.tensors, 2500);
  CheckpointDir ckpt(dir.str());
  expect_error([&] { ckpt.tensor("lm_head.weight"); }, {dir.str(), "no tensor named 'lm_head.weight'"});
}

TEST(CheckpointDir, NoWeightsFound) {
  test::TempDir dir("ckpt-empty");
  expect_error([&] { CheckpointDir c(dir.str()); }, {dir.str(), "no model.safetensors or model.safetensors.index.json"});
}

TEST(CheckpointDir, MissingShard) {
  test::TempDir dir("ckpt-noshard");
  FiveTensors five;
  save_safetensors_sharded(dir.str(), five.tensors, 2500);
  fs::remove(dir.path() / "model-00002-of-00003.safetensors");
  expect_error([&] { CheckpointDir c(dir.str()); },
               {"model.safetensors.index.json", "shard 'model-00002-of-00003.safetensors'", "missing"});
}

TEST(CheckpointDir, IndexMapsTensorToWrongShard) {
  test::TempDir dir("ckpt-wrongshard");
  FiveTensors five;
  save_safetensors_sharded(dir.str(), five.tensors, 2500);
  const std::string index_path = dir.str() + "/model.safetensors.index.json";
  auto index = nlohmann::json::parse(read_text_file(index_path));
  index["weight_map"]["t0"] = "model-00003-of-00003.safetensors";
  write_file_atomic(index_path, index.dump());
  expect_error([&] { CheckpointDir c(dir.str()); }, {index_path, "'t0'", "is not in it"});
}

TEST(CheckpointDir, IndexNotJson) {
  test::TempDir dir("ckpt-badindex");
  const std::string index_path = dir.str() + "/model.safetensors.index.json";
  write_file_atomic(index_path, "{\"weight_map\": ");
  expect_error([&] { CheckpointDir c(dir.str()); }, {index_path, "not valid JSON"});
  write_file_atomic(index_path, "{\"metadata\": {}}");
  expect_error([&] { CheckpointDir c(dir.str()); }, {index_path, "no \"weight_map\""});
}

// Found by fuzz/safetensors_index_fuzz: a shard name longer than the file system allows
// made std::filesystem::exists throw filesystem_error ("File name too long").
TEST(CheckpointDir, IndexShardNameTooLong) {
  test::TempDir dir("ckpt-longname");
  const std::string index_path = dir.str() + "/model.safetensors.index.json";
  const std::string shard(5000, 'm');
  write_file_atomic(index_path, nlohmann::json{{"weight_map", {{"a", shard}}}}.dump());
  expect_error([&] { CheckpointDir c(dir.str()); }, {index_path, "is missing", "File name too long"});
}

// Found by fuzz/safetensors_index_fuzz: a number too large for a double ("1e400]&", the
// minimized input) is nlohmann's out_of_range, which escaped as a non-lt::Error.
TEST(CheckpointDir, IndexNumberTooLargeForADouble) {
  test::TempDir dir("ckpt-1e400");
  const std::string index_path = dir.str() + "/model.safetensors.index.json";
  write_file_atomic(index_path, "1e400]&");
  expect_error([&] { CheckpointDir c(dir.str()); }, {index_path, "not valid JSON", "1e400"});
}

}  // namespace
}  // namespace lt
