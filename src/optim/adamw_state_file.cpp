// AdamW state file: bit-exact save and load.
//
// Layout (little-endian, as written by this x86-64 / aarch64 host):
//   header  : "LTADAMW1" (8 bytes) | u32 version = 1 | u32 tensor count | u64 block size
//   tensors : per tensor, in registration order:
//             u32 name length | name bytes | u64 n | u8 format (0 F32, 1 Q8)
//             F32: m [n] f32 | v [n] f32
//             Q8 : m codes [n] u8 | v codes [n] u8 | m absmax [nb] f32 | v absmax [nb] f32
//   trailer : u64 FNV-1a hash of every byte before it | "LTADEND." (8 bytes)
// The file is written to "<path>.tmp" and renamed, so a crash never leaves half a file
// under the real name (a failed save removes the .tmp). load(path) reads everything into
// scratch buffers, checks the hash and that the file ends exactly after the trailer, and
// only then replaces the live state. load(path, pager) checks the same in a first pass that
// keeps no payload, then reads the file again straight into the states, checking that the
// second pass sees the same bytes (adamw.h has the contract).
// The tensor payloads are the sections of the in-memory state layout (adamw.h) without
// its alignment padding; paged tensors are saved from and loaded into attached storage.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "optim/adamw.h"

namespace lt {

static_assert(std::endian::native == std::endian::little, "state files are little-endian");

namespace {

constexpr char kMagic[8] = {'L', 'T', 'A', 'D', 'A', 'M', 'W', '1'};
constexpr char kEndMagic[8] = {'L', 'T', 'A', 'D', 'E', 'N', 'D', '.'};
constexpr uint32_t kVersion = 1;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

class Writer {
 public:
  Writer(std::FILE* f, const std::string& path) : f_(f), path_(path) {}
  void bytes(const void* p, size_t n) {
    hash(p, n);
    if (n && std::fwrite(p, 1, n, f_) != n)
      throw Error(std::string("write failed: ") + std::strerror(errno), path_, "check free disk space and permissions");
  }
  template <typename T>
  void pod(const T& x) { bytes(&x, sizeof(T)); }
  uint64_t digest() const { return h_; }
  void hash(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ b[i]) * 0x100000001b3ull;
  }

 private:
  std::FILE* f_;
  std::string path_;
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// Thrown for what is wrong with the file itself (not with the pager), so that load's second
// pass can tell "the file changed" from the pager's own errors.
class FileError : public Error {
 public:
  using Error::Error;
};

class Reader {
 public:
  Reader(std::FILE* f, const std::string& path) : f_(f), path_(path) {}
  void bytes(void* p, size_t n, const char* what) {
    if (n && std::fread(p, 1, n, f_) != n)
      throw FileError(std::string("file ends inside ") + what + " (truncated?)", path_,
                      "use a complete state file written by AdamW::save");
    hash(p, n);
  }
  // Reads and hashes n bytes without keeping them, through one buffer of at most 1 MiB.
  void skip(size_t n, const char* what) {
    if (chunk_.empty() && n) chunk_.resize(std::min(n, kChunk));
    while (n) {
      const size_t k = std::min(n, chunk_.size());
      bytes(chunk_.data(), k, what);
      n -= k;
    }
  }
  template <typename T>
  T pod(const char* what) {
    T x;
    bytes(&x, sizeof(T), what);
    return x;
  }
  uint64_t digest() const { return h_; }
  void hash(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ b[i]) * 0x100000001b3ull;
  }
  std::FILE* file() { return f_; }
  const std::string& path() const { return path_; }

 private:
  static constexpr size_t kChunk = size_t{1} << 20;
  std::FILE* f_;
  std::string path_;
  uint64_t h_ = 0xcbf29ce484222325ull;
  std::vector<unsigned char> chunk_;
};

// The header: magic, version, and the tensor count and block size the optimizer has.
void read_header(Reader& r, size_t count_want, int64_t block_want) {
  const std::string& path = r.path();
  char magic[8];
  r.bytes(magic, 8, "the header");
  if (std::memcmp(magic, kMagic, 8) != 0)
    throw FileError("not an lazytrain AdamW state file (bad magic)", path, "pass the file AdamW::save wrote");
  const auto version = r.pod<uint32_t>("the header");
  if (version != kVersion)
    throw FileError("state file version " + std::to_string(version) + ", expected " + std::to_string(kVersion), path,
                    "re-create the state with this build");
  const auto count = r.pod<uint32_t>("the header");
  const auto block = r.pod<uint64_t>("the header");
  if (count != count_want)
    throw FileError("state file holds " + std::to_string(count) + " tensors, the optimizer has " +
                        std::to_string(count_want),
                    path, "register the same tensors as when the file was saved");
  if (block != static_cast<uint64_t>(block_want))
    throw FileError("state file block size " + std::to_string(block) + ", optimizer " + std::to_string(block_want),
                    path, "use the block size the state was saved with");
}

// A name read from the file, fit for an error message: bytes outside printable ASCII as
// \xHH (a damaged file's name may hold a NUL, which would end the message), at most 80.
std::string printable_name(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (name.size() > 80) out += "...";
  return out;
}

// One tensor's header, which must describe the registered tensor (name, n, format).
void read_tensor_header(Reader& r, const std::string& want_name, int64_t want_n, StateFormat want_format) {
  const auto len = r.pod<uint32_t>("a tensor name");
  if (len > 4096) throw FileError("corrupt tensor name length", r.path(), "the file is damaged");
  std::string name(len, '\0');
  r.bytes(name.data(), len, "a tensor name");
  const auto n = r.pod<uint64_t>("a tensor header");
  const auto format = r.pod<uint8_t>("a tensor header");
  if (name != want_name || n != static_cast<uint64_t>(want_n) || format != static_cast<uint8_t>(want_format))
    throw FileError("state file has tensor '" + printable_name(name) + "' (" + std::to_string(n) + " elements, format " +
                        std::to_string(format) + ") where the optimizer has '" + want_name + "' (" +
                        std::to_string(want_n) + ", format " + std::to_string(static_cast<int>(want_format)) + ")",
                    r.path(), "register the same tensors, in the same order, with the same options");
}

// The trailer: the hash of everything before it, the end magic, and nothing after.
void read_trailer(Reader& r) {
  const uint64_t want = r.digest();
  uint64_t got = 0;
  char end[8];
  if (std::fread(&got, 8, 1, r.file()) != 1 || std::fread(end, 8, 1, r.file()) != 1)
    throw FileError("file ends before its trailer (truncated?)", r.path(), "use a complete state file");
  if (std::memcmp(end, kEndMagic, 8) != 0 || got != want)
    throw FileError("checksum mismatch: the state file is corrupt", r.path(), "restore it from another checkpoint");
  if (std::fgetc(r.file()) != EOF)
    throw FileError("trailing bytes after the end of the state", r.path(),
                    "the file is damaged or not a state file");
}

// Removes the .tmp of a save that did not get to its rename.
class TmpFileGuard {
 public:
  explicit TmpFileGuard(std::string path) : path_(std::move(path)) {}
  TmpFileGuard(const TmpFileGuard&) = delete;
  TmpFileGuard& operator=(const TmpFileGuard&) = delete;
  ~TmpFileGuard() {
    if (armed_) {
      std::error_code ec;
      std::filesystem::remove(path_, ec);
    }
  }
  void release() { armed_ = false; }

 private:
  std::string path_;
  bool armed_ = true;
};

}  // namespace

void AdamW::check_pager(const AdamWStatePager& pager, const char* where) const {
  for (const Tensor& t : tensors_)
    if (t.paged && (!pager.page_in || !pager.page_out))
      throw Error("a pager without page_in or page_out, and " + t.name + " is paged", where,
                  "set both functions of the AdamWStatePager");
}

void AdamW::save(const std::string& path) const {
  for (const Tensor& t : tensors_)
    if (!t.storage())
      throw Error("the state of " + t.name + " is paged out", "AdamW::save", "attach its storage before saving");
  save_file(path, nullptr);
}

void AdamW::save(const std::string& path, const AdamWStatePager& pager) const {
  check_pager(pager, "AdamW::save");
  save_file(path, &pager);
}

// pager null: every paged tensor is attached (checked by the caller).
void AdamW::save_file(const std::string& path, const AdamWStatePager* pager) const {
  const std::string tmp = path + ".tmp";
  {
    File f(std::fopen(tmp.c_str(), "wb"));
    if (!f) throw Error("cannot create the optimizer state file", tmp, "check the directory exists and is writable");
    TmpFileGuard guard(tmp);
    Writer w(f.get(), tmp);
    w.bytes(kMagic, 8);
    w.pod(kVersion);
    w.pod(static_cast<uint32_t>(tensors_.size()));
    w.pod(static_cast<uint64_t>(cfg_.block_size));
    for (size_t id = 0; id < tensors_.size(); ++id) {
      const Tensor& t = tensors_[id];
      w.pod(static_cast<uint32_t>(t.name.size()));
      w.bytes(t.name.data(), t.name.size());
      w.pod(static_cast<uint64_t>(t.n));
      w.pod(static_cast<uint8_t>(t.format));
      const bool page = pager && t.paged;
      if (page) {
        pager->page_in(static_cast<int>(id));
        if (!t.attached)
          throw Error("the pager's page_in left the state of " + t.name + " paged out", "AdamW::save",
                      "attach_state(" + std::to_string(id) + ", ...) in page_in");
      }
      for (const Section& s : sections(t)) w.bytes(t.storage() + s.offset, s.bytes);
      if (page) pager->page_out(static_cast<int>(id), false);
    }
    const uint64_t h = w.digest();
    if (std::fwrite(&h, 8, 1, f.get()) != 1 || std::fwrite(kEndMagic, 8, 1, f.get()) != 1 ||
        std::fflush(f.get()) != 0)
      throw Error(std::string("write failed: ") + std::strerror(errno), tmp, "check free disk space");
    if (std::fclose(f.release()) != 0)
      throw Error(std::string("write failed: ") + std::strerror(errno), tmp, "check free disk space");
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw Error("cannot rename " + tmp + ": " + ec.message(), path, "check permissions");
    guard.release();
  }
}

void AdamW::load(const std::string& path) {
  for (const Tensor& t : tensors_)
    if (!t.storage())
      throw Error("the state of " + t.name + " is paged out", "AdamW::load", "attach its storage before loading");
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error("cannot open the optimizer state file", path, "check the path");
  Reader r(f.get(), path);
  read_header(r, tensors_.size(), cfg_.block_size);
  std::vector<AlignedBuffer<std::byte>> loaded;
  for (const Tensor& t : tensors_) {
    read_tensor_header(r, t.name, t.n, t.format);
    AlignedBuffer<std::byte> x(layout(t).total);  // zero padding, like a fresh region
    for (const Section& s : sections(t)) r.bytes(x.data() + s.offset, s.bytes, t.name.c_str());
    loaded.push_back(std::move(x));
  }
  read_trailer(r);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    Tensor& t = tensors_[i];
    if (t.paged)
      std::memcpy(t.attached, loaded[i].data(), loaded[i].size());
    else
      t.owned = std::move(loaded[i]);
  }
}

void AdamW::load(const std::string& path, const AdamWStatePager& pager) {
  check_pager(pager, "AdamW::load");
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error("cannot open the optimizer state file", path, "check the path");
  // Pass 1: the whole file checks out; nothing is kept and no state changes.
  {
    Reader r(f.get(), path);
    read_header(r, tensors_.size(), cfg_.block_size);
    for (const Tensor& t : tensors_) {
      read_tensor_header(r, t.name, t.n, t.format);
      for (const Section& s : sections(t)) r.skip(s.bytes, t.name.c_str());
    }
    read_trailer(r);
  }
  // Pass 2: the same bytes again, straight into the states.
  if (std::fseek(f.get(), 0, SEEK_SET) != 0)
    throw Error("cannot seek back to the start of the optimizer state file", path, "check the file system");
  try {
    Reader r(f.get(), path);
    read_header(r, tensors_.size(), cfg_.block_size);
    for (size_t id = 0; id < tensors_.size(); ++id) {
      Tensor& t = tensors_[id];
      read_tensor_header(r, t.name, t.n, t.format);
      if (t.paged) {
        pager.page_in(static_cast<int>(id));
        if (!t.attached)
          throw Error("the pager's page_in left the state of " + t.name + " paged out", "AdamW::load",
                      "attach_state(" + std::to_string(id) + ", ...) in page_in");
      }
      std::byte* base = t.storage();
      std::memset(base, 0, layout(t).total);  // the padding, too
      for (const Section& s : sections(t)) r.bytes(base + s.offset, s.bytes, t.name.c_str());
      if (t.paged) pager.page_out(static_cast<int>(id), true);
    }
    read_trailer(r);
  } catch (const FileError& e) {
    throw Error("the state file changed while it was being loaded: it checked out, then reading it again failed (" +
                    std::string(e.what()) +
                    "); the optimizer states read so far, owned and paged, may hold its new bytes",
                path, "restore the optimizer state from another checkpoint");
  }
}

}  // namespace lt
