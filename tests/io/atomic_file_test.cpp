// AtomicFileWriter: a failed or abandoned write never replaces the file under the final name.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <sys/resource.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

namespace lt {
namespace {

namespace fs = std::filesystem;

size_t entries_in(const std::string& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}));
}

TEST(AtomicFile, UncommittedWriteLeavesNothing) {
  test::TempDir dir("atomic-abandon");
  {
    AtomicFileWriter w(dir.str() + "/f");
    w.write("hello", 5);
  }
  EXPECT_EQ(entries_in(dir.str()), 0u);
}

TEST(AtomicFile, CommitReplacesOldContents) {
  test::TempDir dir("atomic-commit");
  write_file_atomic(dir.str() + "/f", "old");
  write_file_atomic(dir.str() + "/f", "new!");
  EXPECT_EQ(read_text_file(dir.str() + "/f"), "new!");
  EXPECT_EQ(entries_in(dir.str()), 1u);
}

// A full disk, simulated with a file-size limit: write() fails with EFBIG (SIGXFSZ is
// ignored for the duration). The error names the path; the old file survives intact.
TEST(AtomicFile, FailedWriteKeepsOldFileAndNamesPath) {
  test::TempDir dir("atomic-full");
  const std::string path = dir.str() + "/model.safetensors";
  float one = 1.f;
  save_safetensors(path, {{"old", {&one, DType::F32, {1}}}});

  std::vector<float> big(1 << 16, 2.f);  // 256 KiB, over the 64 KiB limit below
  struct rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    save_safetensors(path, {{"new", {big.data(), DType::F32, {static_cast<int64_t>(big.size())}}}});
  } catch (const Error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_NE(message.find("write failed"), std::string::npos) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
  SafetensorsFile f(path);
  EXPECT_TRUE(f.contains("old"));
  EXPECT_EQ(entries_in(dir.str()), 1u) << "the temporary file was not removed";
}

// A file whose directories do not exist yet: they are made, and nothing is left in them
// (`lazytrain profile` checks its output this way before it measures for a minute).
TEST(AtomicFile, PrepareOutputCreatesItsDirectoryAndLeavesNoFile) {
  test::TempDir dir("atomic-prepare");
  const std::string path = dir.str() + "/profiles/nested/local.json";
  prepare_output_file(path, "--out");
  EXPECT_TRUE(fs::is_directory(dir.str() + "/profiles/nested"));
  EXPECT_EQ(entries_in(dir.str() + "/profiles/nested"), 0u);
  write_file_atomic(path, "{}");
  EXPECT_EQ(read_text_file(path), "{}");
}

// A directory that cannot be made (a file stands where it would go): the error names the
// option and the path, before any work.
TEST(AtomicFile, PrepareOutputNamesAnUnwritablePlace) {
  test::TempDir dir("atomic-prepare-bad");
  write_file_atomic(dir.str() + "/profiles", "a file, not a directory");
  const std::string path = dir.str() + "/profiles/local.json";
  std::string message;
  try {
    prepare_output_file(path, "--out");
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("--out"), std::string::npos) << message;
  EXPECT_NE(message.find(dir.str() + "/profiles"), std::string::npos) << message;
}

}  // namespace
}  // namespace lt
