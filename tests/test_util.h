// Helpers shared by the test suite.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace lt::test {

// A fresh directory under the build tree's test scratch area, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& tag);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// A shell command's exit and its stdout (and whatever else the command redirects there).
struct ShellResult {
  int exit_code = -1;  // -1: it did not exit (killed by a signal, or popen failed)
  int signal = 0;      // the signal that killed it
  std::string output;
};
ShellResult run_shell(const std::string& cmd);

struct PythonResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs tests/reference/<script> with the project's Python (LT_PYTHON, the .venv made by
// `scripts/setup.sh --test`). Reference tests must not pass when this fails: call
// ASSERT_PYTHON_OK, which fails the test with the script's output as the reason.
//
// With LT_PYTHON_REFERENCES=off in the environment (the sanitized run in .ci/run), the test
// that calls this is skipped at that point, so exactly the tests that need Python are left
// out, and ctest lists them as skipped: it prints "[  SKIPPED ] <test> needs the Python
// reference <script>", removes the test's TempDirs and ends the process with status 0
// (the test's own code up to here has run, sanitized). That needs one test per process,
// as ctest runs them (gtest_discover_tests); in a process that runs several tests it fails
// the test instead of skipping the rest.
PythonResult run_reference_script(const std::string& script, const std::string& args);

// The raw files the reference scripts exchange: our fp32 inputs written as little-endian
// float32, their float64 results read back. read_raw_f64 returns an empty vector when the
// file holds fewer than n doubles (a script that stopped early).
void write_raw_f32(const std::string& path, const std::vector<float>& v);
std::vector<double> read_raw_f64(const std::string& path, size_t n);

// The message of the lt::Error that f throws; empty when it throws none.
std::string error_of(const std::function<void()>& f);

}  // namespace lt::test

#define ASSERT_PYTHON_OK(result)                                                           \
  ASSERT_EQ((result).exit_code, 0)                                                         \
      << "the Python reference could not run (did `scripts/setup.sh --test` make .venv?)\n" \
      << (result).output
