// Fuzz target: a .safetensors file (io/safetensors.h, SafetensorsFile), as a model
// directory's model.safetensors or a shard.
//
// Input: byte 0 picks the framing, the rest is the file.
//   even: the rest is the whole file, byte for byte (8-byte length, JSON header, data);
//   odd:  the rest is "JSON header" then data, and the harness writes the 8-byte length:
//         byte 1 says how many trailing bytes are data (so mutations of the JSON are not
//         all stopped by a length that no longer matches).
// On success every tensor view is read end to end (first and last byte), so an entry the
// validation let through that points outside the mapping shows up as a crash.
// Finding: any crash, ASan/UBSan report, leak, hang, LT_ASSERT, or an exception other
// than lt::Error (fuzz_util.h).
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  ++data, --size;
  std::string file;
  if (mode % 2 == 0) {
    file.assign(reinterpret_cast<const char*>(data), size);
  } else {
    if (size < 1) return 0;
    const size_t tail = std::min<size_t>(data[0], size - 1);
    ++data, --size;
    const uint64_t header_len = size - tail;
    for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>((header_len >> (8 * i)) & 0xff));
    file.append(reinterpret_cast<const char*>(data), size);
  }
  const std::string path = lt::fuzz::scratch().write("model.safetensors", file);
  lt::fuzz::expect_only_lt_error([&] {
    lt::SafetensorsFile f(path);
    volatile uint8_t sink = 0;
    for (const std::string& name : f.names()) {
      const lt::SafetensorsEntry& e = f.entry(name);
      const lt::TensorView v = f.tensor(name);
      for (int64_t d : e.shape)
        if (d < 0) lt::fuzz::finding("tensor '" + name + "' has a negative dimension");
      const size_t bytes = e.end - e.begin;
      if (bytes != static_cast<size_t>(v.numel()) * lt::dtype_size(v.dtype))
        lt::fuzz::finding("tensor '" + name + "': byte span and shape disagree");
      if (bytes) {
        const uint8_t* p = static_cast<const uint8_t*>(v.data);
        if (f.data_offset() + e.end > file.size()) lt::fuzz::finding("tensor '" + name + "' ends past the file");
        sink = sink + p[0] + p[bytes - 1];
      }
    }
    for (const auto& [k, val] : f.metadata()) sink = sink + static_cast<uint8_t>(k.size() + val.size());
    (void)sink;
  });
  return 0;
}
