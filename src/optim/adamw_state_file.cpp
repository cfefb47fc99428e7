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
// under the real name. load() reads everything into scratch buffers, checks the hash and
// that the file ends exactly after the trailer, and only then replaces the live state.
// The tensor payloads are the sections of the in-memory state layout (adamw.h) without
// its alignment padding; paged tensors are saved from and loaded into attached storage.
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

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
      throw Error("write failed", path_, "check free disk space and permissions");
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

class Reader {
 public:
  Reader(std::FILE* f, const std::string& path) : f_(f), path_(path) {}
  void bytes(void* p, size_t n, const char* what) {
    if (n && std::fread(p, 1, n, f_) != n)
      throw Error(std::string("file ends inside ") + what + " (truncated?)", path_,
                  "use a complete state file written by AdamW::save");
    hash(p, n);
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

 private:
  std::FILE* f_;
  std::string path_;
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace

void AdamW::save(const std::string& path) const {
  for (const Tensor& t : tensors_)
    if (!t.storage())
      throw Error("the state of " + t.name + " is paged out", "AdamW::save", "attach its storage before saving");
  const std::string tmp = path + ".tmp";
  {
    File f(std::fopen(tmp.c_str(), "wb"));
    if (!f) throw Error("cannot create the optimizer state file", tmp, "check the directory exists and is writable");
    Writer w(f.get(), tmp);
    w.bytes(kMagic, 8);
    w.pod(kVersion);
    w.pod(static_cast<uint32_t>(tensors_.size()));
    w.pod(static_cast<uint64_t>(cfg_.block_size));
    for (const Tensor& t : tensors_) {
      w.pod(static_cast<uint32_t>(t.name.size()));
      w.bytes(t.name.data(), t.name.size());
      w.pod(static_cast<uint64_t>(t.n));
      w.pod(static_cast<uint8_t>(t.format));
      for (const Section& s : sections(t)) w.bytes(t.storage() + s.offset, s.bytes);
    }
    const uint64_t h = w.digest();
    if (std::fwrite(&h, 8, 1, f.get()) != 1 || std::fwrite(kEndMagic, 8, 1, f.get()) != 1 ||
        std::fflush(f.get()) != 0)
      throw Error("write failed", tmp, "check free disk space");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("cannot rename " + tmp + ": " + ec.message(), path, "check permissions");
}

void AdamW::load(const std::string& path) {
  for (const Tensor& t : tensors_)
    if (!t.storage())
      throw Error("the state of " + t.name + " is paged out", "AdamW::load", "attach its storage before loading");
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error("cannot open the optimizer state file", path, "check the path");
  Reader r(f.get(), path);
  char magic[8];
  r.bytes(magic, 8, "the header");
  if (std::memcmp(magic, kMagic, 8) != 0)
    throw Error("not an lazytrain AdamW state file (bad magic)", path, "pass the file AdamW::save wrote");
  const auto version = r.pod<uint32_t>("the header");
  if (version != kVersion)
    throw Error("state file version " + std::to_string(version) + ", expected " + std::to_string(kVersion), path,
                "re-create the state with this build");
  const auto count = r.pod<uint32_t>("the header");
  const auto block = r.pod<uint64_t>("the header");
  if (count != tensors_.size())
    throw Error("state file holds " + std::to_string(count) + " tensors, the optimizer has " +
                    std::to_string(tensors_.size()),
                path, "register the same tensors as when the file was saved");
  if (block != static_cast<uint64_t>(cfg_.block_size))
    throw Error("state file block size " + std::to_string(block) + ", optimizer " + std::to_string(cfg_.block_size),
                path, "use the block size the state was saved with");

  std::vector<AlignedBuffer<std::byte>> loaded;
  for (const Tensor& t : tensors_) {
    const auto len = r.pod<uint32_t>("a tensor name");
    if (len > 4096) throw Error("corrupt tensor name length", path, "the file is damaged");
    std::string name(len, '\0');
    r.bytes(name.data(), len, "a tensor name");
    const auto n = r.pod<uint64_t>("a tensor header");
    const auto format = r.pod<uint8_t>("a tensor header");
    if (name != t.name || n != static_cast<uint64_t>(t.n) || format != static_cast<uint8_t>(t.format))
      throw Error("state file has tensor '" + name + "' (" + std::to_string(n) + " elements, format " +
                      std::to_string(format) + ") where the optimizer has '" + t.name + "' (" +
                      std::to_string(t.n) + ", format " + std::to_string(static_cast<int>(t.format)) + ")",
                  path, "register the same tensors, in the same order, with the same options");
    AlignedBuffer<std::byte> x(layout(t).total);  // zero padding, like a fresh region
    for (const Section& s : sections(t)) r.bytes(x.data() + s.offset, s.bytes, t.name.c_str());
    loaded.push_back(std::move(x));
  }
  const uint64_t want = r.digest();
  uint64_t got = 0;
  char end[8];
  if (std::fread(&got, 8, 1, f.get()) != 1 || std::fread(end, 8, 1, f.get()) != 1)
    throw Error("file ends before its trailer (truncated?)", path, "use a complete state file");
  if (std::memcmp(end, kEndMagic, 8) != 0 || got != want)
    throw Error("checksum mismatch: the state file is corrupt", path, "restore it from another checkpoint");
  if (std::fgetc(f.get()) != EOF)
    throw Error("trailing bytes after the end of the state", path, "the file is damaged or not a state file");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    Tensor& t = tensors_[i];
    if (t.paged)
      std::memcpy(t.attached, loaded[i].data(), loaded[i].size());
    else
      t.owned = std::move(loaded[i]);
  }
}

}  // namespace lt
