#include "test_util.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <sys/wait.h>
#include <unistd.h>

namespace lt::test {

TempDir::TempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::path(LT_BINARY_DIR) / "test-scratch" /
          (tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

PythonResult run_reference_script(const std::string& script, const std::string& args) {
  PythonResult r;
  const std::string python = LT_PYTHON;
  if (!std::filesystem::exists(python)) {
    r.output = "Python interpreter not found at " + python;
    return r;
  }
  const std::string cmd = "'" + python + "' '" + std::string(LT_TESTS_DIR) + "/reference/" +
                          script + "' " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) {
    r.output = "popen failed for: " + cmd;
    return r;
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (r.exit_code != 0) r.output = "command: " + cmd + "\n" + r.output;
  return r;
}

}  // namespace lt::test
