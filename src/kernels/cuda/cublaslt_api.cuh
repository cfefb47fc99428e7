// cuBLASLt, loaded when the first GEMM needs it rather than when a program starts.
//
// Why not link it: libcublasLt is about half a gigabyte; a program that links it maps it at
// start-up whether it runs a product or not (measured: 70-90 ms and about 200 MB more
// resident per process). Every lazytrain executable contains the cuda backend, and most
// never use it (CPU training, plan, the tests of everything else), so the library is
// opened with dlopen at the first Gemm, by the soname of the toolkit we were built against,
// and its functions are taken from it by name. The declarations and types are cublasLt.h's
// own, so a signature that changes between toolkits fails to compile here.
// Included by .cu files only.
#pragma once

#include <cublasLt.h>

namespace lt::cuda {

struct CublasLtApi {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtGetVersion) get_version;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set_attribute;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&cublasLtMatmul) matmul;
};

// Opens cuBLASLt on the first call (thread-safe) and returns its functions. Throws
// std::runtime_error saying which library could not be opened or lacks which function, and
// what to do, when it is missing or of another major version than the headers we were
// built with.
const CublasLtApi& cublaslt();

}  // namespace lt::cuda
