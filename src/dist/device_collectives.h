// Sums and gathers of compute-tier (GPU) memory across the ranks (issue 29, part C): NCCL,
// opened at run time (libnccl.so.2, by dlopen as cuBLASLt is: linked, its 200 MB would be
// mapped by every process, every test among them), one NCCL communicator per process on
// its CUDA device, whose unique id rank 0 makes and sends to the others over the ranks'
// MPI communicator (dist/communicator.h).
//
// Unlike Communicator's host sums, NCCL's do not add in rank order: every rank gets the
// same bits, but not the bits of a host sum in rank order (NCCL's ring and tree orders
// depend on the rank count and topology). Each call is issued on `stream` (a cudaStream_t)
// and done when that stream reaches it.
//
// The streamed data-parallel trainer sums the layers' and the head's gradient slots before
// they drain, where a step is one micro-batch (train/streamed_training.h), with
// sum_beside(): on a stream of the collectives' own, after the layer's backward, while the
// compute stream goes on to the next layer; the slot's copy to the host waits for it
// (order_after). Not yet: the owners' updated weights all-gathered on the device.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dist/communicator.h"

namespace lt {

class DeviceCollectives {
 public:
  // Joins every rank of `ranks` (a collective: all of them construct it together), on CUDA
  // device `device`, connecting NCCL's buffers now rather than at the first sum (unless the
  // environment sets NCCL_RUNTIME_CONNECT): make it before the arena. lt::Error naming what
  // is missing (unavailable_reason()) otherwise.
  DeviceCollectives(Communicator& ranks, int device);
  ~DeviceCollectives();
  DeviceCollectives(const DeviceCollectives&) = delete;
  DeviceCollectives& operator=(const DeviceCollectives&) = delete;

  // data[0, n) := the sum over ranks of their data[0, n) (fp32), the same bits on every rank.
  void sum(float* data, int64_t n, void* stream);
  // The same sum, at rank `root` alone (its data[0, n); the others' data are left as
  // they are) or for root -1 at every rank, on a stream of the collectives' own (made at
  // the first call): it starts once the work issued on stream `after` so far is done, and
  // runs beside the work issued there later. The ticket it returns goes to order_after,
  // once.
  int64_t sum_beside(float* data, int64_t n, void* after, int root = -1);
  // The work issued on `stream` from now on starts after ticket's sum is done.
  void order_after(int64_t ticket, void* stream);
  // data[0, n) on every rank := rank root's.
  void broadcast(int root, float* data, int64_t n, void* stream);
  // part[0, n) := the sum over ranks of their in[rank * n, rank * n + n); in holds size() * n.
  void reduce_scatter_sum(const float* in, float* part, int64_t n, void* stream);
  // out[r * n, r * n + n) := rank r's part[0, n), for every r.
  void all_gather(const float* part, float* out, int64_t n, void* stream);

  int size() const { return size_; }
  int rank() const { return rank_; }
  // "NCCL 2.28.9, 2 ranks" (the library's version, not the headers').
  std::string describe() const;

  // Why no DeviceCollectives can be made in this process: no CUDA in the build, no device,
  // or no NCCL library to open. Empty when one can.
  static std::string unavailable_reason();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int size_ = 1, rank_ = 0;
};

}  // namespace lt
