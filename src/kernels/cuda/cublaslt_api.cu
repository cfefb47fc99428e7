#include "kernels/cuda/cublaslt_api.cuh"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace lt::cuda {
namespace {

#define LT_STRINGIFY_(x) #x
#define LT_STRINGIFY(x) LT_STRINGIFY_(x)
// The soname of the cuBLAS release whose headers we compile against: libcublasLt.so.13.
constexpr const char* kSoname = "libcublasLt.so." LT_STRINGIFY(CUBLAS_VER_MAJOR);

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "no reason given";
}

void* open_library() {
  // The loader's own search first (LD_LIBRARY_PATH, ld.so.cache), then the toolkit's
  // library folder at build time, where a toolkit outside the loader's paths keeps it.
  if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return h;
  std::string why = dl_error();
#ifdef LT_CUDA_LIBRARY_DIR
  const std::string at_build = std::string(LT_CUDA_LIBRARY_DIR) + "/" + kSoname;
  if (void* h = dlopen(at_build.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  why += "; " + dl_error();
#endif
  throw std::runtime_error(std::string("cannot load cuBLASLt (") + kSoname + "), which the GPU's matrix products need: " +
                           why + ". Install the CUDA toolkit's cuBLAS " + LT_STRINGIFY(CUBLAS_VER_MAJOR) +
                           ", or add the folder that holds " + kSoname + " to LD_LIBRARY_PATH");
}

template <class Fn>
void take(Fn& fn, void* library, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (!fn)
    throw std::runtime_error(std::string("cuBLASLt (") + kSoname + ") has no function " + name + ": " + dl_error() +
                             ". The library found is not the cuBLAS " + LT_STRINGIFY(CUBLAS_VER_MAJOR) +
                             " lazytrain was built with; put that one first on LD_LIBRARY_PATH");
}

CublasLtApi load() {
  void* lib = open_library();  // kept open for the process: the functions live in it
  CublasLtApi api{};
  take(api.create, lib, "cublasLtCreate");
  take(api.destroy, lib, "cublasLtDestroy");
  take(api.get_version, lib, "cublasLtGetVersion");
  take(api.layout_create, lib, "cublasLtMatrixLayoutCreate");
  take(api.layout_destroy, lib, "cublasLtMatrixLayoutDestroy");
  take(api.desc_create, lib, "cublasLtMatmulDescCreate");
  take(api.desc_destroy, lib, "cublasLtMatmulDescDestroy");
  take(api.desc_set_attribute, lib, "cublasLtMatmulDescSetAttribute");
  take(api.preference_create, lib, "cublasLtMatmulPreferenceCreate");
  take(api.preference_destroy, lib, "cublasLtMatmulPreferenceDestroy");
  take(api.preference_set_attribute, lib, "cublasLtMatmulPreferenceSetAttribute");
  take(api.algo_get_heuristic, lib, "cublasLtMatmulAlgoGetHeuristic");
  take(api.matmul, lib, "cublasLtMatmul");
  // cublasLtGetVersion: major * 10000 + minor * 100 + patch, as CUBLAS_VERSION.
  const size_t major = api.get_version() / 10000;
  if (major != CUBLAS_VER_MAJOR)
    throw std::runtime_error(std::string("cuBLASLt ") + kSoname + " reports version " +
                             std::to_string(api.get_version()) + ", but lazytrain was built with cuBLAS " +
                             LT_STRINGIFY(CUBLAS_VER_MAJOR) + "; put the matching library first on LD_LIBRARY_PATH");
  return api;
}

}  // namespace

const CublasLtApi& cublaslt() {
  static const CublasLtApi api = load();
  return api;
}

}  // namespace lt::cuda
