#include "train/checkpoints.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"

namespace fs = std::filesystem;

namespace lt {

namespace {

constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kDoneMarker = "DONE";
// Hidden names a save or a rotation works under; a crash can leave them behind.
constexpr const char* kTmpSuffix = ".tmp";
constexpr const char* kRetiredSuffix = ".old";

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%06lld", kPrefix, static_cast<long long>(step));
  return buf;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// checkpoint-NNNNNN directories, complete (with DONE) or not, oldest first (names sort by
// step: zero-padded).
std::vector<fs::path> checkpoint_dirs(const std::string& output_dir, bool complete) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory(ec) && name.rfind(kPrefix, 0) == 0 && fs::exists(e.path() / kDoneMarker, ec) == complete)
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// fsync a file or directory so that the rename below publishes data that is on disk.
void sync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Removes a checkpoint without ever leaving a half-deleted directory under a checkpoint
// name: it is first renamed to a hidden .checkpoint-N.old (atomic), then deleted. A crash
// in between leaves only the hidden name, which the next clean-up removes.
void retire(const fs::path& dir) {
  std::error_code ec;
  const fs::path hidden = dir.parent_path() / ("." + dir.filename().string() + kRetiredSuffix);
  fs::remove_all(hidden, ec);
  fs::rename(dir, hidden, ec);
  fs::remove_all(ec ? dir : hidden, ec);
}

}  // namespace

void prepare_output_dir(const std::string& output_dir) {
  const std::string where = "train config (output_dir " + output_dir + ")";
  std::error_code ec;
  if (fs::exists(output_dir, ec) && !fs::is_directory(output_dir, ec))
    throw Error("the output directory is an existing file, not a directory", where,
                "pass --output-dir a directory (it is created if missing)");
  fs::create_directories(output_dir, ec);
  if (ec)
    throw Error("cannot create the output directory: " + ec.message(), where,
                "pass --output-dir a path on a writable file system");
  // Writable? Creating a file is the only test that also catches read-only mounts and
  // (for non-root users) permissions, before any step is spent.
  const fs::path probe = fs::path(output_dir) / (".lazytrain-write-test." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw Error(std::string("cannot write in the output directory: ") + std::strerror(errno), where,
                "pass --output-dir a writable directory (checkpoints and metrics go there)");
  ::close(fd);
  ::unlink(probe.c_str());
}

int64_t checkpoint_count(const nlohmann::json& j, const char* key, int64_t max, const std::string& path) {
  const std::string where = path + " (" + key + ")";
  if (!j.is_object() || !j.contains(key)) throw Error(std::string("missing \"") + key + "\"", where, "use another checkpoint");
  const nlohmann::json& v = j[key];
  bool ok = false;
  int64_t n = 0;
  if (v.is_number_unsigned()) {
    ok = v.get<uint64_t>() <= static_cast<uint64_t>(max);
    if (ok) n = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    n = v.get<int64_t>();
    ok = n >= 0 && n <= max;
  }
  if (!ok)
    throw Error("\"" + std::string(key) + "\" is " + v.dump() + ", not a whole number in [0, " + std::to_string(max) + "]",
                where, "the file is damaged; use another checkpoint");
  return n;
}

std::optional<std::string> newest_complete_checkpoint(const std::string& output_dir) {
  auto all = checkpoint_dirs(output_dir, true);
  if (all.empty()) return std::nullopt;
  return all.back().string();
}

void clean_up_checkpoints(const std::string& output_dir, int64_t keep) {
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return;
  // Hidden leftovers: an interrupted save (.tmp) or rotation (.old). A .tmp that holds
  // DONE was complete and only not yet renamed (a crash while it replaced a checkpoint of
  // the same step): it is published instead.
  std::vector<fs::path> leftovers;
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(std::string(".") + kPrefix, 0) == 0 && (ends_with(name, kTmpSuffix) || ends_with(name, kRetiredSuffix)))
      leftovers.push_back(e.path());
  }
  for (const fs::path& p : leftovers) {
    const std::string name = p.filename().string();
    if (ends_with(name, kTmpSuffix) && fs::exists(p / kDoneMarker, ec)) {
      const fs::path final_dir = p.parent_path() / name.substr(1, name.size() - 1 - std::strlen(kTmpSuffix));
      if (!fs::exists(final_dir / kDoneMarker, ec)) {
        fs::remove_all(final_dir, ec);
        fs::rename(p, final_dir, ec);
        if (!ec) continue;
      }
    }
    fs::remove_all(p, ec);
  }
  // A checkpoint-N without DONE: saves publish by renaming a directory that already holds
  // DONE, so this can only be what a crash during a deletion (of an older version) left.
  for (const fs::path& p : checkpoint_dirs(output_dir, false)) retire(p);
  const auto all = checkpoint_dirs(output_dir, true);
  for (size_t i = 0; i + static_cast<size_t>(std::max<int64_t>(keep, 1)) < all.size(); ++i) retire(all[i]);
}

std::string save_checkpoint(const std::string& output_dir, int64_t step, int64_t keep,
                            const std::function<void(const std::string& dir)>& write_contents) {
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec) throw Error("cannot create the output directory: " + ec.message(), output_dir, "check the path and permissions");
  clean_up_checkpoints(output_dir, keep);
  const std::string name = checkpoint_name(step);
  const fs::path tmp = fs::path(output_dir) / ("." + name + kTmpSuffix);
  const fs::path final_dir = fs::path(output_dir) / name;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw Error("cannot create the checkpoint directory: " + ec.message(), tmp.string(), "check the disk");
  try {
    write_contents(tmp.string());
    for (const auto& e : fs::directory_iterator(tmp)) sync_path(e.path());
    write_file_atomic((tmp / kDoneMarker).string(), std::to_string(step) + "\n");
  } catch (...) {
    // A full disk, say: free what the partial checkpoint took, so that the disk is no
    // fuller than before the save; earlier checkpoints are untouched.
    fs::remove_all(tmp, ec);
    throw;
  }
  sync_path(tmp);
  // A re-save of the same step: the old one is renamed away first; a crash before the
  // rename below leaves the complete .tmp, which clean_up_checkpoints publishes.
  const fs::path replaced = fs::path(output_dir) / ("." + name + kRetiredSuffix);
  if (fs::exists(final_dir, ec)) {
    fs::remove_all(replaced, ec);
    fs::rename(final_dir, replaced, ec);
  }
  fs::rename(tmp, final_dir, ec);
  if (ec) throw Error("cannot publish the checkpoint: " + ec.message(), final_dir.string(), "check the disk");
  sync_path(output_dir);
  clean_up_checkpoints(output_dir, keep);
  return final_dir.string();
}

}  // namespace lt
