#include "dist/device_collectives.h"

#include "core/error.h"
#include "exec/backend_cuda.h"

#ifdef LT_HAVE_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>

#include <map>
#include <vector>
#endif

namespace lt {
namespace {
constexpr const char* kWhere = "device collectives (NCCL)";
}  // namespace

#ifdef LT_HAVE_NCCL

namespace {

#define LT_NCCL_STRINGIFY_(x) #x
#define LT_NCCL_STRINGIFY(x) LT_NCCL_STRINGIFY_(x)
// The soname of the NCCL release whose header we compile against: libnccl.so.2.
constexpr const char* kSoname = "libnccl.so." LT_NCCL_STRINGIFY(NCCL_MAJOR);

// The functions we call, typed by the header's own declarations.
struct NcclApi {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclReduce) reduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  std::string error;  // why the library could not be used; empty when it can
};

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "no reason given";
}

// The loader's own search first (LD_LIBRARY_PATH, ld.so.cache), then the CUDA toolkit's
// library folder at build time, where this machine's toolkit keeps NCCL.
void* open_nccl(std::string& why) {
  if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return h;
  why = dl_error();
#ifdef LT_CUDA_LIBRARY_DIR
  const std::string at_build = std::string(LT_CUDA_LIBRARY_DIR) + "/" + kSoname;
  if (void* h = dlopen(at_build.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  why += "; " + dl_error();
#endif
  return nullptr;
}

template <class Fn>
bool take(Fn& fn, void* library, const char* name, std::string& error) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (!fn) error = std::string("NCCL (") + kSoname + ") has no function " + name + ": " + dl_error();
  return fn != nullptr;
}

NcclApi load() {
  NcclApi a;
  std::string why;
  void* lib = open_nccl(why);  // kept open for the process: the functions live in it
  if (!lib) {
    a.error = std::string("cannot load NCCL (") + kSoname + "): " + why;
    return a;
  }
  (void)(take(a.get_version, lib, "ncclGetVersion", a.error) &&
         take(a.get_unique_id, lib, "ncclGetUniqueId", a.error) &&
         take(a.comm_init_rank, lib, "ncclCommInitRank", a.error) &&
         take(a.comm_destroy, lib, "ncclCommDestroy", a.error) &&
         take(a.error_string, lib, "ncclGetErrorString", a.error) &&
         take(a.all_reduce, lib, "ncclAllReduce", a.error) && take(a.reduce, lib, "ncclReduce", a.error) &&
         take(a.broadcast, lib, "ncclBroadcast", a.error) &&
         take(a.reduce_scatter, lib, "ncclReduceScatter", a.error) &&
         take(a.all_gather, lib, "ncclAllGather", a.error));
  return a;
}

const NcclApi& nccl() {
  static const NcclApi api = load();
  return api;
}

void check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess)
    throw Error(std::string(call) + " failed: " + nccl().error_string(r), kWhere,
                "NCCL_DEBUG=WARN prints NCCL's own account of it");
}

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(std::string(call) + " failed: " + cudaGetErrorString(e), kWhere, "");
  }
}

size_t count(int64_t n) {
  if (n < 0) throw Error("a negative element count (" + std::to_string(n) + ")", kWhere, "");
  return static_cast<size_t>(n);
}

}  // namespace

struct DeviceCollectives::Impl {
  ncclComm_t comm = nullptr;
  int device = 0;
  // sum_beside's: its stream, the point of the caller's stream a sum starts from (recorded
  // anew for each: a stream's wait takes the event as it is when the wait is issued), and
  // each sum's end until order_after has ordered a stream after it; then its event is spare.
  cudaStream_t own = nullptr;
  cudaEvent_t start = nullptr;
  std::map<int64_t, cudaEvent_t> ends;
  std::vector<cudaEvent_t> spare;
  int64_t last_ticket = 0;
};

std::string DeviceCollectives::unavailable_reason() {
  if (std::string no_device = cuda_device_missing_reason(); !no_device.empty()) return no_device;
  return nccl().error;
}

DeviceCollectives::DeviceCollectives(Communicator& ranks, int device)
    : impl_(std::make_unique<Impl>()), size_(ranks.size()), rank_(ranks.rank()) {
  if (const std::string why = unavailable_reason(); !why.empty())
    throw Error(why, kWhere, "run on a machine with an NVIDIA GPU, its driver and NCCL " LT_NCCL_STRINGIFY(NCCL_MAJOR));
  // NCCL 2.22 and later connect the ranks' buffers at each kind of collective's first call
  // (NCCL_RUNTIME_CONNECT=1): device memory taken mid-step, after the executor's arena, that
  // the plan never saw, and a transport that fails (a container's small /dev/shm) failing
  // there. Connected here instead, the buffers come before the arena (whose check sees the
  // device's free memory then) and a failure is the set-up's. A user's own setting stays.
  // Set before any NCCL call, on every rank (NCCL reads its settings once).
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  check(cudaSetDevice(device), "cudaSetDevice");
  // Rank 0 makes the id; the others take it from rank 0 over MPI before joining.
  ncclUniqueId id{};
  if (rank_ == 0) check(nccl().get_unique_id(&id), "ncclGetUniqueId");
  if (rank_ == 0)
    for (int r = 1; r < size_; ++r) ranks.send(r, &id, sizeof id);
  else
    ranks.recv(0, &id, sizeof id);
  check(nccl().comm_init_rank(&impl_->comm, size_, id, rank_), "ncclCommInitRank");
  impl_->device = device;
}

DeviceCollectives::~DeviceCollectives() {
  if (!impl_) return;
  Impl& m = *impl_;
  if (m.own) cudaStreamSynchronize(m.own);  // no sum still running when the communicator goes
  for (const auto& [ticket, e] : m.ends) cudaEventDestroy(e);
  for (cudaEvent_t e : m.spare) cudaEventDestroy(e);
  if (m.start) cudaEventDestroy(m.start);
  if (m.own) cudaStreamDestroy(m.own);
  if (m.comm) nccl().comm_destroy(m.comm);
}

void DeviceCollectives::sum(float* data, int64_t n, void* stream) {
  check(nccl().all_reduce(data, data, count(n), ncclFloat32, ncclSum, impl_->comm, static_cast<cudaStream_t>(stream)),
        "ncclAllReduce");
}

int64_t DeviceCollectives::sum_beside(float* data, int64_t n, void* after, int root) {
  Impl& m = *impl_;
  if (!m.own) {
    check(cudaSetDevice(m.device), "cudaSetDevice");  // the stream's device, whichever thread calls
    check(cudaStreamCreateWithFlags(&m.own, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaEventCreateWithFlags(&m.start, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  check(cudaEventRecord(m.start, static_cast<cudaStream_t>(after)), "cudaEventRecord");
  check(cudaStreamWaitEvent(m.own, m.start, 0), "cudaStreamWaitEvent");
  if (root < 0)
    sum(data, n, m.own);
  else
    check(nccl().reduce(data, data, count(n), ncclFloat32, ncclSum, root, m.comm, m.own), "ncclReduce");
  cudaEvent_t end = nullptr;
  if (m.spare.empty()) {
    check(cudaEventCreateWithFlags(&end, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  } else {
    end = m.spare.back();
    m.spare.pop_back();
  }
  m.ends.emplace(++m.last_ticket, end);
  check(cudaEventRecord(end, m.own), "cudaEventRecord");
  return m.last_ticket;
}

void DeviceCollectives::order_after(int64_t ticket, void* stream) {
  Impl& m = *impl_;
  const auto it = m.ends.find(ticket);
  if (it == m.ends.end())
    throw Error("no sum with ticket " + std::to_string(ticket) + " is waiting to be ordered after", kWhere,
                "each ticket of sum_beside goes to order_after once");
  const cudaEvent_t end = it->second;
  m.ends.erase(it);
  m.spare.push_back(end);  // the wait below takes the event as it is now
  check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), end, 0), "cudaStreamWaitEvent");
}

void DeviceCollectives::broadcast(int root, float* data, int64_t n, void* stream) {
  check(nccl().broadcast(data, data, count(n), ncclFloat32, root, impl_->comm, static_cast<cudaStream_t>(stream)),
        "ncclBroadcast");
}

void DeviceCollectives::reduce_scatter_sum(const float* in, float* part, int64_t n, void* stream) {
  check(nccl().reduce_scatter(in, part, count(n), ncclFloat32, ncclSum, impl_->comm,
                              static_cast<cudaStream_t>(stream)),
        "ncclReduceScatter");
}

void DeviceCollectives::all_gather(const float* part, float* out, int64_t n, void* stream) {
  check(nccl().all_gather(part, out, count(n), ncclFloat32, impl_->comm, static_cast<cudaStream_t>(stream)),
        "ncclAllGather");
}

std::string DeviceCollectives::describe() const {
  int v = 0;
  check(nccl().get_version(&v), "ncclGetVersion");
  // Since NCCL 2.9: major * 10000 + minor * 100 + patch.
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) +
         ", " + std::to_string(size_) + (size_ == 1 ? " rank" : " ranks");
}

#else  // no NCCL in this build

struct DeviceCollectives::Impl {};

std::string DeviceCollectives::unavailable_reason() {
#ifdef LT_HAVE_CUDA
  return "this lazytrain was built without NCCL (CMake found no nccl.h beside the CUDA toolkit)";
#else
  return "this lazytrain was built without CUDA (CMake found no working nvcc, or LT_CUDA was OFF)";
#endif
}

DeviceCollectives::DeviceCollectives(Communicator& ranks, int) : size_(ranks.size()), rank_(ranks.rank()) {
  throw Error(unavailable_reason(), kWhere, "install the CUDA toolkit and NCCL, and reconfigure");
}

DeviceCollectives::~DeviceCollectives() = default;

void DeviceCollectives::sum(float*, int64_t, void*) { throw Error(unavailable_reason(), kWhere, ""); }
int64_t DeviceCollectives::sum_beside(float*, int64_t, void*, int) { throw Error(unavailable_reason(), kWhere, ""); }
void DeviceCollectives::order_after(int64_t, void*) { throw Error(unavailable_reason(), kWhere, ""); }
void DeviceCollectives::broadcast(int, float*, int64_t, void*) { throw Error(unavailable_reason(), kWhere, ""); }
void DeviceCollectives::reduce_scatter_sum(const float*, float*, int64_t, void*) {
  throw Error(unavailable_reason(), kWhere, "");
}
void DeviceCollectives::all_gather(const float*, float*, int64_t, void*) {
  throw Error(unavailable_reason(), kWhere, "");
}
std::string DeviceCollectives::describe() const { return unavailable_reason(); }

#endif

}  // namespace lt
