#include "train/checkpoints.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"

namespace fs = std::filesystem;

namespace lt {

namespace {

constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kDoneMarker = "DONE";

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%06lld", kPrefix, static_cast<long long>(step));
  return buf;
}

// Complete checkpoints, oldest first (names sort by step: zero-padded).
std::vector<fs::path> complete_checkpoints(const std::string& output_dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind(kPrefix, 0) == 0 && fs::exists(e.path() / kDoneMarker))
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

}  // namespace

std::optional<std::string> newest_complete_checkpoint(const std::string& output_dir) {
  auto all = complete_checkpoints(output_dir);
  if (all.empty()) return std::nullopt;
  return all.back().string();
}

std::string save_checkpoint(const std::string& output_dir, int64_t step, int64_t keep,
                            const std::function<void(const std::string& dir)>& write_contents) {
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec) throw Error("cannot create the output directory: " + ec.message(), output_dir, "check the path and permissions");
  // Leftovers of a save that was interrupted.
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(std::string(".") + kPrefix, 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == ".tmp")
      fs::remove_all(e.path(), ec);
  }
  const std::string name = checkpoint_name(step);
  const fs::path tmp = fs::path(output_dir) / ("." + name + ".tmp");
  const fs::path final_dir = fs::path(output_dir) / name;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  write_contents(tmp.string());
  for (const auto& e : fs::directory_iterator(tmp)) sync_path(e.path());
  write_file_atomic((tmp / kDoneMarker).string(), std::to_string(step) + "\n");
  sync_path(tmp);
  if (fs::exists(final_dir)) fs::remove_all(final_dir);  // a re-save of the same step
  fs::rename(tmp, final_dir, ec);
  if (ec) throw Error("cannot publish the checkpoint: " + ec.message(), final_dir.string(), "check the disk");
  sync_path(output_dir);
  auto all = complete_checkpoints(output_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) fs::remove_all(all[i], ec);
  return final_dir.string();
}

}  // namespace lt
