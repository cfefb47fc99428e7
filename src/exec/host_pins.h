// The host memory a streamed step's links copy from and to outside the executor's own
// buffers, pinned once for a run, never per step: the parameters (the weights H2D reads in
// fp32 steps; the norms and, where there is no bf16 copy, the head in every step), their
// bf16 copy (what bf16 steps' H2D reads) and the gradients (where backward's D2H lands
// them). On a GPU, copies of pageable memory go through the driver's staging buffers and
// return only when done, so the weight prefetch and gradient drain the plan overlaps with
// compute would run in line with it. A backend whose copies are memcpy pins nothing.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "exec/backend.h"
#include "model/parameters.h"

namespace lt {

struct HostPins {
  std::vector<std::unique_ptr<Backend::HostPin>> pins;  // unpinned as they go
  size_t bytes = 0;  // pinned
  // Why nothing is pinned on a backend that pins (empty when pinned, or when the backend
  // has nothing to pin).
  std::string not_pinned;
};

// Pins params, grads and copy (null under fp32). A failure unpins what was pinned and says
// why in not_pinned: the copies then run from pageable memory, slower but the same.
HostPins pin_step_memory(Backend& backend, ModelParameters& params, ModelParameters& grads, bf16* copy);

}  // namespace lt
