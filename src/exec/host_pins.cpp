#include "exec/host_pins.h"

#include <utility>

#include "core/error.h"

namespace lt {

HostPins pin_step_memory(Backend& backend, ModelParameters& params, ModelParameters& grads, bf16* copy) {
  const size_t n = static_cast<size_t>(params.numel());
  const std::pair<void*, size_t> ranges[] = {
      {params.data(), n * sizeof(float)}, {grads.data(), n * sizeof(float)}, {copy, copy ? n * sizeof(bf16) : 0}};
  HostPins out;
  try {
    for (auto [p, bytes] : ranges) {
      if (!p || !bytes) continue;
      if (std::unique_ptr<Backend::HostPin> pin = backend.pin_host(p, bytes)) {
        out.pins.push_back(std::move(pin));
        out.bytes += bytes;
      }
    }
  } catch (const Error& e) {
    out.pins.clear();
    out.bytes = 0;
    out.not_pinned = e.what();
  }
  return out;
}

}  // namespace lt
