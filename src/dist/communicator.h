// The ranks of a data-parallel run and the collectives the trainer needs (issue 29, part
// A): MPI when a launcher started this process (`mpirun -np N lazytrain train ...`), else a
// world of one rank in which every collective is the identity.
//
// Every sum here runs in rank order and lands bitwise identical on every rank, whatever
// algorithm the MPI library picks: an array is cut into one contiguous shard per rank,
// each rank receives every rank's copy of its own shard (MPI_Alltoallv), adds them in rank
// order 0, 1, ..., N-1 in fp32 (as one rank would add them), and the summed shards are
// gathered back to all (MPI_Allgatherv). So the ranks never diverge, and the result for a
// given N is reproducible run to run. It is not the bits of a one-process run: that sums
// the same terms in one pass over all rows (see tests/dist/data_parallel_test.cpp for
// the bound).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lt {

class Communicator {
 public:
  // Joins the launcher's world: MPI_Init when the environment says an MPI launcher started
  // this process (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE or PMIX_RANK), else a world of
  // one. Throws lt::Error when launched by MPI but built without it. At most one per
  // process (MPI_Init may run once).
  Communicator();
  ~Communicator();  // MPI_Finalize, when this object called MPI_Init
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  // "1 process" or "2 ranks over MPI (Open MPI v4.1.4)".
  std::string describe() const;

  // data[0, n) := the sum over ranks of every rank's data[0, n), in rank order, the same
  // bits on every rank. Scratch: at most kChunkFloats floats at a time.
  void sum_in_rank_order(float* data, int64_t n);
  // The sum over ranks of v, in rank order, the same on every rank.
  double sum_in_rank_order(double v);
  // Every rank's v, indexed by rank.
  std::vector<uint64_t> all_gather(uint64_t v);
  void barrier();
  // Ends every rank's process now (MPI_Abort): after an error on one rank, the others may
  // wait in a collective that never completes. A world of one exits.
  [[noreturn]] void abort_all(int code);

  // What the collectives cost this rank so far: the bytes it handed MPI for other ranks
  // (the payload; the library's algorithm may forward more), and the wall time spent in
  // the collective calls, summing and waiting for the slowest rank included.
  int64_t bytes_sent() const { return bytes_sent_; }
  double collective_seconds() const { return collective_seconds_; }

  // Floats summed per round of sum_in_rank_order (64 MiB): bounds its scratch.
  static constexpr int64_t kChunkFloats = int64_t(16) << 20;

 private:
  int rank_ = 0, size_ = 1;
  bool mpi_ = false;  // this object initialized MPI
  int64_t bytes_sent_ = 0;
  double collective_seconds_ = 0;
  std::vector<float> scratch_;
};

// A 64-bit fingerprint of n floats' bits (FNV-1a's mixing, one 32-bit word at a time):
// equal arrays give equal fingerprints; for checking that the ranks hold the same weights.
uint64_t fingerprint(const float* data, int64_t n);

}  // namespace lt
