// The cuda backend (shared/DESIGN.md, "Backends"): device memory for the compute tier,
// pinned host memory for the host tier (taken once, at setup), and three CUDA streams
// (compute, H2D, D2H) whose copies run as cudaMemcpyAsync, ordered by CUDA events.
//
// What is built so far (issue 27, part 2): the memory, the streams, the copies and fills,
// the events, the copies' timing, and a kernel table (kernels/cuda/cuda_kernel_table.h) on
// the compute stream with every family the dense and hybrid layers call; the step's small
// inputs the kernels read live in the host tier's pinned memory (exec/step_inputs.h). No
// training step has run on a GPU yet, so make_backend("cuda") and `train` refuse it,
// saying so, unless LT_CUDA_TRIAL=1 asks for a trial run. (MoE layers refuse it on
// their own: their experts have no device kernels.)
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "exec/backend.h"

namespace lt {

// Why `train` cannot run on the cuda backend here: this build has no CUDA, or the machine
// no CUDA device (with the driver's reason), or the backend is not complete. Empty once
// it can run.
// With a device, LT_CUDA_TRIAL=1 lifts the last refusal (no step has run end to end on a
// GPU yet), for a first trial against --backend cpu.
std::string cuda_backend_unavailable_reason();
inline constexpr const char* kCudaTrialEnv = "LT_CUDA_TRIAL";
// The first part of it: no CUDA in this build, or no CUDA device (with the driver's
// reason). Empty where a device is there to use.
std::string cuda_device_missing_reason();
// The CUDA devices this process sees: 0 without CUDA in the build or a driver.
int cuda_device_count();
// Where CUDA device `device` (in this process's numbering) sits on its host's PCI bus:
// 1 + (domain << 16 | bus << 8 | device), the same whatever numbering CUDA_VISIBLE_DEVICES
// gives a process; 0 without CUDA in the build, or no such device. Asks the driver only
// (no context is made on the device).
uint64_t cuda_device_pci_key(int device);
// "0000:3b:00" for a key of cuda_device_pci_key.
std::string pci_address(uint64_t key);

// The backend on CUDA device `device`. lt::Error when this build has no CUDA or there is
// no such device. For tests and benches of the backend itself until its kernel table
// lands; `train` goes through make_backend, which refuses it until then.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

// The cuda backend's kernel table (kernels/cuda/cuda_kernel_table.h), for its scratch
// sizes before a backend exists (no device needed). lt::Error in a build without CUDA.
const KernelTable& cuda_backend_kernel_table();

}  // namespace lt
