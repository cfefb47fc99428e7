#include "dist/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

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
  if (!initialized) {
    if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) {
      g_exists = false;
      throw Error("MPI_Init failed", "data-parallel launch", "start lazytrain with mpirun -np N, or without it");
    }
    mpi_ = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
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
  return std::to_string(size_) + (size_ == 1 ? " rank" : " ranks") + " over MPI (" + lib + ")";
#else
  return "1 process";
#endif
}

void Communicator::sum_in_rank_order(float* data, int64_t n) {
  if (size_ == 1 || n <= 0) return;
#ifdef LT_HAVE_MPI
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t N = size_;
  for (int64_t start = 0; start < n; start += kChunkFloats) {
    const int64_t m = std::min(kChunkFloats, n - start);
    float* chunk = data + start;
    // Shard s: [off[s], off[s] + len[s]) of the chunk, owned by rank s.
    std::vector<int> len(static_cast<size_t>(N)), off(static_cast<size_t>(N));
    for (int64_t s = 0; s < N; ++s) {
      const int64_t lo = m * s / N, hi = m * (s + 1) / N;
      off[size_t(s)] = int(lo);
      len[size_t(s)] = int(hi - lo);
    }
    const int mine = len[size_t(rank_)];
    // Out: every other rank's shard of my chunk, then my summed shard to each other rank.
    bytes_sent_ += int64_t(sizeof(float)) * ((m - mine) + mine * (N - 1));
    // Every rank's copy of my shard, rank after rank.
    scratch_.resize(size_t(mine) * size_t(N));
    std::vector<int> recv_len(static_cast<size_t>(N), mine), recv_off(static_cast<size_t>(N));
    for (int64_t s = 0; s < N; ++s) recv_off[size_t(s)] = int(s * mine);
    check(MPI_Alltoallv(chunk, len.data(), off.data(), MPI_FLOAT, scratch_.data(), recv_len.data(), recv_off.data(),
                        MPI_FLOAT, MPI_COMM_WORLD),
          "MPI_Alltoallv", rank_, size_);
    // Each element: rank 0's value, plus rank 1's, ... in that order (threads split the
    // elements, never an element's sum, so the bits do not depend on the thread count).
    float* shard = chunk + off[size_t(rank_)];
    const float* received = scratch_.data();
#pragma omp parallel for schedule(static)
    for (int i = 0; i < mine; ++i) {
      float sum = received[i];
      for (int64_t s = 1; s < N; ++s) sum += received[s * mine + i];
      shard[i] = sum;
    }
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, chunk, len.data(), off.data(), MPI_FLOAT,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv", rank_, size_);
  }
  scratch_.clear();
  scratch_.shrink_to_fit();
  collective_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#else
  (void)data;
  LT_ASSERT(false, "a world of more than one rank without MPI");
#endif
}

double Communicator::sum_in_rank_order(double v) {
  if (size_ == 1) return v;
  std::vector<double> all(size_t(size_), 0.0);
#ifdef LT_HAVE_MPI
  check(MPI_Allgather(&v, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD), "MPI_Allgather", rank_, size_);
#endif
  double sum = 0;
  for (double x : all) sum += x;
  return sum;
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
