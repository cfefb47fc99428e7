// Helpers shared by the libFuzzer targets in fuzz/ (see scripts/fuzz.sh).
//
// What every target counts as a finding: a crash, an ASan or UBSan report, a leak, a hang
// (libFuzzer's -timeout), an LT_ASSERT (an abort), and any exception other than lt::Error.
// A thrown lt::Error is the expected outcome for bad input, and it must say what was
// wrong, where, and what to do (DESIGN.md "Two error tiers"): the three-part constructor
// writes "what (in where): fix"; a message without " (in " is a finding too.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <typeinfo>
#include <unistd.h>

#include "core/error.h"

namespace lt::fuzz {

// Aborts with the message: libFuzzer reports it as a crash and saves the input.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "\n==lt-fuzz== FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs body(); an lt::Error ends it quietly (after checking its message names a place),
// anything else thrown is a finding.
template <typename F>
void expect_only_lt_error(F&& body) {
  try {
    body();
  } catch (const lt::Error& e) {
    const std::string_view msg = e.what();
    if (msg.find(" (in ") == std::string_view::npos)
      finding("lt::Error without a place (\"what (in where): fix\"): " + std::string(msg));
  } catch (const std::exception& e) {
    finding(std::string("exception other than lt::Error: ") + typeid(e).name() + ": " + e.what());
  } catch (...) {
    finding("exception of a non-std type");
  }
}

// A per-process scratch directory, in /dev/shm when it exists (no disk writes per input),
// removed at exit. For parsers that only take a path.
class ScratchDir {
 public:
  ScratchDir() {
    std::error_code ec;
    const std::filesystem::path base =
        std::filesystem::is_directory("/dev/shm", ec) ? "/dev/shm" : std::filesystem::temp_directory_path();
    path_ = base / ("lt-fuzz-" + std::to_string(getpid()));
    std::filesystem::remove_all(path_, ec);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

  // Writes bytes to `path` (replacing it) and returns the path.
  static std::string write_at(const std::string& path, const void* data, size_t size) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) finding("cannot create the scratch file " + path);
    if (size && std::fwrite(data, 1, size, f) != size) finding("cannot write the scratch file " + path);
    std::fclose(f);
    return path;
  }
  // Writes bytes to <dir>/<name> (replacing it) and returns the path.
  std::string write(const std::string& name, const void* data, size_t size) const {
    return write_at((path_ / name).string(), data, size);
  }
  std::string write(const std::string& name, std::string_view s) const { return write(name, s.data(), s.size()); }

 private:
  std::filesystem::path path_;
};

// One scratch directory for the process (a function-local static: made on first use, so
// after libFuzzer forked nothing; removed at normal exit).
inline const ScratchDir& scratch() {
  static const ScratchDir dir;
  return dir;
}

}  // namespace lt::fuzz
