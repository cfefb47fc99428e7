// The cpu backend: compute tier and host tier are the same RAM, so copies are plain
// memcpy that finish before they return.
#include <cstring>

#include "core/error.h"
#include "exec/backend.h"
#include "exec/backend_cuda.h"

namespace lt {
namespace {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  bool host_is_compute() const override { return true; }
  void copy_to_compute(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
    h2d_bytes += bytes;
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
    d2h_bytes += bytes;
  }
  void synchronize() override {}
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

std::unique_ptr<Backend> make_backend(const std::string& name, int device) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "emu") return make_emu_backend();
  if (name == "cuda") {
    const std::string why = cuda_backend_unavailable_reason();
    if (why.empty()) return make_cuda_backend(device);
    throw Error(why, "streaming executor (backend cuda)", "use --backend cpu or emu");
  }
  throw Error("unknown backend '" + name + "'", "streaming executor", "use --backend cpu or emu");
}

const KernelTable& backend_kernel_table(const std::string& name) {
  if (name == "cpu" || name == "emu") return cpu_kernel_table();
  if (name == "cuda") return cuda_backend_kernel_table();
  throw Error("unknown backend '" + name + "'", "streaming executor", "use --backend cpu, emu or cuda");
}

}  // namespace lt
