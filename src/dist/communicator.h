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

#include <algorithm>
#include <cstdint>
#include <functional>
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
  // This rank among the ranks on its host (those that share its memory), and how many
  // they are: which of the host's GPUs is this rank's.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  // The lowest world rank on this rank's host: equal exactly for the ranks that share a
  // host (MPI's shared-memory split, not host names, which containers may repeat).
  int host_id() const { return host_id_; }
  // "1 process" or "2 ranks over MPI (Open MPI v4.1.4), 2 on this host".
  std::string describe() const;

  // data[0, n) := the sum over ranks of every rank's data[0, n), in rank order, the same
  // bits on every rank: reduce_scatter_in_rank_order, then all_gather_parts, over parts
  // of n / size() elements.
  void sum_in_rank_order(float* data, int64_t n);
  // The sum over ranks of v, in rank order (0 + v_0 + v_1 + ...), the same on every rank.
  double sum_in_rank_order(double v);
  // v[i] := the sum over ranks of every rank's v[i], each in rank order as above.
  void sum_in_rank_order(double* v, int64_t n);

  // The halves of a sharded sum (ZeRO): `bounds` (size() + 1 ascending offsets, the same on
  // every rank) cut data into parts, part r = [bounds[r], bounds[r + 1]) for rank r.
  // reduce_scatter_in_rank_order: rank r's part r := the sum over ranks of their part r, in
  // rank order (the bits sum_in_rank_order gives it); the rest of data stays as it was.
  // all_gather_parts: every rank's part r := rank r's part r. Scratch: at most about
  // 2 kChunkFloats floats at a time.
  void reduce_scatter_in_rank_order(float* data, const std::vector<int64_t>& bounds);
  void all_gather_parts(float* data, const std::vector<int64_t>& bounds);

  // data[0, n) on rank `owner` := the sum over ranks of their data[0, n), in rank order (the
  // bits reduce_scatter_in_rank_order gives); the others only send theirs. Every rank calls
  // it with the same owner and n. Single-threaded (for a background thread). Scratch: at
  // most 2 kChunkFloats floats, in `scratch` (the caller's, so this may run beside the
  // other collectives' buffers).
  void reduce_to_in_rank_order(int owner, float* data, int64_t n, std::vector<float>& scratch);
  // data[0, n) on every rank := rank `root`'s data[0, n).
  void broadcast(int root, float* data, int64_t n);
  // MPI_THREAD_SERIALIZED or better: one other thread may make the calls while this one
  // does not (BackgroundCollectives). False in a world of one without MPI.
  bool serialized_threads() const { return serialized_threads_; }

  // Point to point, blocking: bytes from this rank to rank `to` / from rank `from`, in
  // pieces of at most 1 GiB (MPI counts are int). Messages between two ranks arrive in the
  // order they were sent.
  void send(int to, const void* data, int64_t bytes);
  void recv(int from, void* data, int64_t bytes);
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

  // Floats moved per round of the sharded sums, over all parts (64 MiB): bounds their
  // scratch.
  static constexpr int64_t kChunkFloats = int64_t(16) << 20;

 private:
  int rank_ = 0, size_ = 1;
  int local_rank_ = 0, local_size_ = 1, host_id_ = 0;
  bool mpi_ = false;  // this object initialized MPI
  bool serialized_threads_ = false;
  static constexpr int kReduceTag = 1;  // reduce_to's messages (send/recv use tag 0)
  // kChunkFloats, or LT_TEST_CHUNK_FLOATS: tests make it small to run many rounds.
  int64_t chunk_floats_ = kChunkFloats;
  int64_t bytes_sent_ = 0;
  double collective_seconds_ = 0;
  // Round k of a sharded sum moves, of each part r, the piece [bounds[r] + k * per_round,
  // + per_round) clipped to the part; the rounds run until the longest part is done.
  // in_rounds calls `round` for each, timed as collective time, then frees the scratch.
  struct Pieces;
  int64_t per_round() const { return std::max<int64_t>(1, chunk_floats_ / size_); }
  void in_rounds(const std::vector<int64_t>& bounds, const char* where,
                 const std::function<void(const Pieces&)>& round);
  void check_bounds(const std::vector<int64_t>& bounds, const char* where) const;
  void release_scratch();
  std::vector<float> scratch_, packed_;
};

// A 64-bit fingerprint of n floats' bits (FNV-1a's mixing, one 32-bit word at a time):
// equal arrays give equal fingerprints; for checking that the ranks hold the same weights.
uint64_t fingerprint(const float* data, int64_t n);

}  // namespace lt
