#include "dist/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>

#include "core/error.h"

#ifdef LT_HAVE_MPI
#include <mpi.h>
#endif

namespace lt {

namespace {

// The world size an MPI launcher announced in the environment, or 0 when none did.
int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* v = std::getenv(var); v && *v) return std::max(1, std::atoi(v));
  if (const char* v = std::getenv("PMIX_RANK"); v && *v) return 1;  // launched, size unknown yet
  return 0;
}

bool g_exists = false;  // one Communicator per process: MPI_Init may run once

#ifdef LT_HAVE_MPI
// Turns an MPI return code into lt::Error naming the call and this rank.
void check(int rc, const char* call, int rank, int size) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string(call) + " failed: " + std::string(text, size_t(len)),
              "rank " + std::to_string(rank) + " of " + std::to_string(size),
              "check that every rank is still running (another rank may have failed: see its error above)");
}

// Polls `request` to completion, sleeping between polls once it is clearly waiting for
// another rank, so that a background thread does not take a core from the compute threads
// (MPI's blocking calls spin).
void wait_politely(MPI_Request& request, const char* call, int rank, int size) {
  int done = 0;
  for (int polls = 0;; ++polls) {
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call, rank, size);
    if (done) return;
    if (polls >= 64) std::this_thread::sleep_for(std::chrono::microseconds(polls < 256 ? 20 : 100));
  }
}
#endif

}  // namespace

Communicator::Communicator() {
  LT_ASSERT(!g_exists, "one Communicator per process");
  g_exists = true;
  const int launched = launcher_world_size();
  if (launched == 0) return;
#ifdef LT_HAVE_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Serialized: a background thread (BackgroundCollectives) makes the calls while backward
    // runs, never at the same time as this one.
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      g_exists = false;
      throw Error("MPI_Init failed", "data-parallel launch", "start lazytrain with mpirun -np N, or without it");
    }
    mpi_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  serialized_threads_ = provided >= MPI_THREAD_SERIALIZED;
  if (const char* v = std::getenv("LT_TEST_CHUNK_FLOATS"); v && std::atoll(v) > 0) chunk_floats_ = std::atoll(v);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm host;  // the ranks that share this one's memory: its host's
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host), "MPI_Comm_split_type",
        rank_, size_);
  MPI_Comm_rank(host, &local_rank_);
  MPI_Comm_size(host, &local_size_);
  check(MPI_Allreduce(&rank_, &host_id_, 1, MPI_INT, MPI_MIN, host), "MPI_Allreduce", rank_, size_);
  MPI_Comm_free(&host);
#else
  if (launched > 1) {
    g_exists = false;
    throw Error("started by an MPI launcher as one of " + std::to_string(launched) +
                    " processes, but this lazytrain was built without MPI",
                "data-parallel launch",
                "install Open MPI (apt-get install libopenmpi-dev openmpi-bin), configure and build again, or run "
                "without mpirun");
  }
#endif
}

Communicator::~Communicator() {
#ifdef LT_HAVE_MPI
  if (mpi_) MPI_Finalize();
#endif
  g_exists = false;
}

std::string Communicator::describe() const {
  if (size_ == 1 && !mpi_) return "1 process";
#ifdef LT_HAVE_MPI
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string lib(version, size_t(len));
  lib = lib.substr(0, lib.find_first_of(",\n"));
  return std::to_string(size_) + (size_ == 1 ? " rank" : " ranks") + " over MPI (" + lib + "), " +
         std::to_string(local_size_) + " on this host";
#else
  return "1 process";
#endif
}

void Communicator::check_bounds(const std::vector<int64_t>& bounds, const char* where) const {
  LT_ASSERT(bounds.size() == size_t(size_) + 1, std::string(where) + ": one part per rank");
  for (size_t r = 0; r + 1 < bounds.size(); ++r)
    LT_ASSERT(bounds[r] >= 0 && bounds[r] <= bounds[r + 1], std::string(where) + ": parts out of order");
}

// Round k's piece of each part: offset and length (0 once the part is done).
struct Communicator::Pieces {
  std::vector<int64_t> at;
  std::vector<int> len, displ;  // displ: where each piece sits when the pieces are packed
  int64_t total = 0;
  int mine = 0;  // this rank's piece's length
};

void Communicator::in_rounds(const std::vector<int64_t>& bounds, const char* where,
                             const std::function<void(const Pieces&)>& round) {
  check_bounds(bounds, where);
  const auto t0 = std::chrono::steady_clock::now();
  const size_t N = size_t(size_);
  const int64_t per = per_round();
  int64_t longest = 0;
  for (size_t r = 0; r < N; ++r) longest = std::max(longest, bounds[r + 1] - bounds[r]);
  for (int64_t k = 0; k * per < longest; ++k) {
    Pieces p;
    p.at.resize(N);
    p.len.resize(N);
    p.displ.resize(N);
    for (size_t r = 0; r < N; ++r) {
      p.at[r] = bounds[r] + k * per;
      p.len[r] = int(std::clamp<int64_t>(bounds[r + 1] - p.at[r], 0, per));
      p.displ[r] = int(p.total);
      p.total += p.len[r];
    }
    p.mine = p.len[size_t(rank_)];
    round(p);
  }
  release_scratch();
  collective_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Communicator::reduce_scatter_in_rank_order(float* data, const std::vector<int64_t>& bounds) {
  if (size_ == 1) return;
#ifdef LT_HAVE_MPI
  in_rounds(bounds, "reduce_scatter_in_rank_order", [&](const Pieces& p) {
    const int N = size_, mine = p.mine;
    // Every rank's piece of my data, packed (MPI's displacements are int; the parts of a
    // large model lie further apart than that).
    packed_.resize(size_t(p.total));
    for (int r = 0; r < N; ++r) std::copy_n(data + p.at[size_t(r)], p.len[size_t(r)], packed_.data() + p.displ[size_t(r)]);
    bytes_sent_ += int64_t(sizeof(float)) * (p.total - mine);
    // Every rank's copy of my piece, rank after rank.
    scratch_.resize(size_t(mine) * size_t(N));
    std::vector<int> recv_len(static_cast<size_t>(N), mine), recv_displ(static_cast<size_t>(N));
    for (int r = 0; r < N; ++r) recv_displ[size_t(r)] = r * mine;
    check(MPI_Alltoallv(packed_.data(), p.len.data(), p.displ.data(), MPI_FLOAT, scratch_.data(), recv_len.data(),
                        recv_displ.data(), MPI_FLOAT, MPI_COMM_WORLD),
          "MPI_Alltoallv", rank_, size_);
    // Each element: rank 0's value, plus rank 1's, ... in that order (threads split the
    // elements, never an element's sum, so the bits do not depend on the thread count).
    float* out = data + p.at[size_t(rank_)];
    const float* received = scratch_.data();
#pragma omp parallel for schedule(static)
    for (int i = 0; i < mine; ++i) {
      float sum = received[i];
      for (int r = 1; r < N; ++r) sum += received[int64_t(r) * mine + i];
      out[i] = sum;
    }
  });
#else
  (void)data, (void)bounds;
  LT_ASSERT(false, "a world of more than one rank without MPI");
#endif
}

void Communicator::all_gather_parts(float* data, const std::vector<int64_t>& bounds) {
  if (size_ == 1) return;
#ifdef LT_HAVE_MPI
  in_rounds(bounds, "all_gather_parts", [&](const Pieces& p) {
    bytes_sent_ += int64_t(sizeof(float)) * p.mine * (size_ - 1);
    scratch_.resize(size_t(p.total));
    check(MPI_Allgatherv(data + p.at[size_t(rank_)], p.mine, MPI_FLOAT, scratch_.data(), p.len.data(),
                         p.displ.data(), MPI_FLOAT, MPI_COMM_WORLD),
          "MPI_Allgatherv", rank_, size_);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) std::copy_n(scratch_.data() + p.displ[size_t(r)], p.len[size_t(r)], data + p.at[size_t(r)]);
  });
#else
  (void)data, (void)bounds;
  LT_ASSERT(false, "a world of more than one rank without MPI");
#endif
}

void Communicator::release_scratch() {
  scratch_.clear();
  scratch_.shrink_to_fit();
  packed_.clear();
  packed_.shrink_to_fit();
}

void Communicator::sum_in_rank_order(float* data, int64_t n) {
  if (size_ == 1 || n <= 0) return;
  std::vector<int64_t> bounds(size_t(size_) + 1);
  for (int r = 0; r <= size_; ++r) bounds[size_t(r)] = n * r / size_;
  reduce_scatter_in_rank_order(data, bounds);
  all_gather_parts(data, bounds);
}

double Communicator::sum_in_rank_order(double v) {
  sum_in_rank_order(&v, 1);
  return v;
}

void Communicator::sum_in_rank_order(double* v, int64_t n) {
  if (size_ == 1 || n <= 0) {
    for (int64_t i = 0; i < n; ++i) v[i] = 0.0 + v[i];  // the same 0 + v_0 as with more ranks
    return;
  }
#ifdef LT_HAVE_MPI
  LT_ASSERT(n <= std::numeric_limits<int>::max() / size_, "sum_in_rank_order: too many doubles for one call");
  std::vector<double> all(size_t(n) * size_t(size_));
  check(MPI_Allgather(v, int(n), MPI_DOUBLE, all.data(), int(n), MPI_DOUBLE, MPI_COMM_WORLD), "MPI_Allgather", rank_,
        size_);
  bytes_sent_ += int64_t(sizeof(double)) * n * (size_ - 1);
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int r = 0; r < size_; ++r) sum += all[size_t(r) * size_t(n) + size_t(i)];
    v[i] = sum;
  }
#endif
}

void Communicator::reduce_to_in_rank_order(int owner, float* data, int64_t n, std::vector<float>& scratch) {
  if (size_ == 1 || n <= 0) return;
  LT_ASSERT(owner >= 0 && owner < size_, "reduce to rank " + std::to_string(owner));
#ifdef LT_HAVE_MPI
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t at = 0; at < n; at += chunk_floats_) {
    const int m = int(std::min(chunk_floats_, n - at));
    float* mine = data + at;
    if (rank_ != owner) {
      check(MPI_Send(mine, m, MPI_FLOAT, owner, kReduceTag, MPI_COMM_WORLD), "MPI_Send", rank_, size_);
      bytes_sent_ += int64_t(sizeof(float)) * m;
      continue;
    }
    // acc = rank 0's values, += rank 1's, ...: the order (and so the bits) of
    // reduce_scatter_in_rank_order, one thread (the caller's threads are computing).
    scratch.resize(2 * size_t(m));
    float *acc = scratch.data(), *in = acc + m;
    for (int r = 0; r < size_; ++r) {
      const float* x = mine;
      if (r != owner) {
        check(MPI_Recv(r == 0 ? acc : in, m, MPI_FLOAT, r, kReduceTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv",
              rank_, size_);
        x = in;
      }
      if (r == 0) {
        if (owner == 0) std::copy_n(mine, m, acc);
        continue;
      }
      for (int i = 0; i < m; ++i) acc[i] += x[i];
    }
    std::copy_n(acc, m, mine);
  }
  collective_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#else
  (void)data, (void)scratch;
#endif
}

void Communicator::broadcast(int root, float* data, int64_t n) {
  if (size_ == 1 || n <= 0) return;
  LT_ASSERT(root >= 0 && root < size_, "broadcast from rank " + std::to_string(root));
#ifdef LT_HAVE_MPI
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t at = 0; at < n; at += chunk_floats_) {
    const int m = int(std::min(chunk_floats_, n - at));
    MPI_Request request;
    check(MPI_Ibcast(data + at, m, MPI_FLOAT, root, MPI_COMM_WORLD, &request), "MPI_Ibcast", rank_, size_);
    wait_politely(request, "MPI_Ibcast", rank_, size_);
    if (rank_ == root) bytes_sent_ += int64_t(sizeof(float)) * m * (size_ - 1);
  }
  collective_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#else
  (void)data;
#endif
}

namespace {
constexpr int64_t kMessagePiece = int64_t(1) << 30;  // bytes per MPI call: counts are int
}  // namespace

void Communicator::send(int to, const void* data, int64_t bytes) {
  LT_ASSERT(to >= 0 && to < size_ && to != rank_, "send to rank " + std::to_string(to));
#ifdef LT_HAVE_MPI
  const auto* p = static_cast<const std::byte*>(data);
  for (int64_t at = 0; at < bytes; at += kMessagePiece) {
    const int n = int(std::min(kMessagePiece, bytes - at));
    check(MPI_Send(p + at, n, MPI_BYTE, to, 0, MPI_COMM_WORLD), "MPI_Send", rank_, size_);
  }
  bytes_sent_ += bytes;
#else
  (void)data, (void)bytes;
#endif
}

void Communicator::recv(int from, void* data, int64_t bytes) {
  LT_ASSERT(from >= 0 && from < size_ && from != rank_, "recv from rank " + std::to_string(from));
#ifdef LT_HAVE_MPI
  auto* p = static_cast<std::byte*>(data);
  for (int64_t at = 0; at < bytes; at += kMessagePiece) {
    const int n = int(std::min(kMessagePiece, bytes - at));
    check(MPI_Recv(p + at, n, MPI_BYTE, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv", rank_, size_);
  }
#else
  (void)data, (void)bytes;
#endif
}

std::vector<uint64_t> Communicator::all_gather(uint64_t v) {
  std::vector<uint64_t> all(size_t(size_), v);
#ifdef LT_HAVE_MPI
  if (size_ > 1)
    check(MPI_Allgather(&v, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "MPI_Allgather", rank_,
          size_);
#endif
  return all;
}

void Communicator::barrier() {
#ifdef LT_HAVE_MPI
  if (size_ > 1) check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", rank_, size_);
#endif
}

void Communicator::abort_all(int code) {
#ifdef LT_HAVE_MPI
  if (size_ > 1 || mpi_) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

uint64_t fingerprint(const float* data, int64_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, over 32-bit words
  for (int64_t i = 0; i < n; ++i) {
    uint32_t w;
    std::memcpy(&w, data + i, sizeof w);
    h = (h ^ w) * 1099511628211ull;
  }
  return h;
}

}  // namespace lt
