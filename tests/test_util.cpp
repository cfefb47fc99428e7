#include "test_util.h"

#include "core/error.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sys/wait.h>
#include <unistd.h>

namespace lt::test {

namespace {

// The live TempDirs, so that a test skipped from inside (LT_PYTHON_REFERENCES=off) can
// remove them before the process ends.
std::mutex& live_dirs_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::filesystem::path>& live_dirs() {
  static std::set<std::filesystem::path> dirs;
  return dirs;
}

bool python_references_off() {
  const char* v = std::getenv("LT_PYTHON_REFERENCES");
  return v && std::strcmp(v, "off") == 0;
}

}  // namespace

TempDir::TempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::path(LT_BINARY_DIR) / "test-scratch" /
          (tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
  std::lock_guard<std::mutex> lock(live_dirs_mutex());
  live_dirs().insert(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  std::lock_guard<std::mutex> lock(live_dirs_mutex());
  live_dirs().erase(path_);
}

PythonResult run_reference_script(const std::string& script, const std::string& args) {
  PythonResult r;
  if (python_references_off()) {
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string name = t ? std::string(t->test_suite_name()) + "." + t->name() : "(no test)";
    if (::testing::UnitTest::GetInstance()->test_to_run_count() != 1) {
      r.output = "LT_PYTHON_REFERENCES=off skips a test only when its process runs that test alone (as ctest "
                 "does); run one test per process, or leave " + name + " out with --gtest_filter";
      return r;
    }
    std::printf("[  SKIPPED ] %s needs the Python reference tests/reference/%s (LT_PYTHON_REFERENCES=off)\n",
                name.c_str(), script.c_str());
    std::fflush(stdout);
    {
      std::lock_guard<std::mutex> lock(live_dirs_mutex());
      std::error_code ec;
      for (const auto& d : live_dirs()) std::filesystem::remove_all(d, ec);
    }
    std::_Exit(0);
  }
  const std::string python = LT_PYTHON;
  if (!std::filesystem::exists(python)) {
    r.output = "Python interpreter not found at " + python;
    return r;
  }
  const std::string cmd = "'" + python + "' '" + std::string(LT_TESTS_DIR) + "/reference/" +
                          script + "' " + args + " 2>&1";
  const ShellResult s = run_shell(cmd);
  r.exit_code = s.exit_code;
  r.output = s.output;
  if (r.exit_code != 0) r.output = "command: " + cmd + "\n" + r.output;
  return r;
}

ShellResult run_shell(const std::string& cmd) {
  ShellResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) {
    r.output = "popen failed for: " + cmd;
    return r;
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_raw_f32(const std::string& path, const std::vector<float>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
}

std::vector<double> read_raw_f64(const std::string& path, size_t n) {
  std::vector<double> v(n);
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(double)));
  if (f.gcount() != std::streamsize(n * sizeof(double))) v.clear();
  return v;
}

}  // namespace lt::test
