// Writes a file under a temporary name and renames it into place on commit(), so a crash
// or a full disk never leaves a half-written file under the final name. Every write is
// checked; failures throw lt::Error naming the path and the OS reason.
#pragma once

#include <cstddef>
#include <string>

namespace lt {

class AtomicFileWriter {
 public:
  // Creates "<path>.tmp.<pid>" next to `path` (same file system, so rename is atomic).
  explicit AtomicFileWriter(const std::string& path);
  // Without commit(), removes the temporary file: the final name is left untouched.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  // fsync, close, rename to the final name, fsync the directory.
  void commit();

  const std::string& path() const { return path_; }
  size_t bytes_written() const { return written_; }

 private:
  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  size_t written_ = 0;
  bool committed_ = false;
};

// Before long work whose result goes to `path`: creates its parent directories and
// checks, with a temporary file that is removed again, that a file can be written there.
// Throws lt::Error naming `where` (the option or key that gave the path) and the reason.
void prepare_output_file(const std::string& path, const std::string& where);
// Writes `text` to `path` through an AtomicFileWriter.
void write_file_atomic(const std::string& path, const std::string& text);
// Reads a whole file; throws lt::Error naming the path.
std::string read_text_file(const std::string& path);

}  // namespace lt
