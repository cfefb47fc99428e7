// The AdamW kernel variants a test compares (AdamWKernel values other than Auto), and why
// one cannot run here. Variants are compared with each other bitwise (they evaluate the
// same fp32 operations), so every runnable one is checked against the scalar kernel.
#pragma once

#include <iostream>
#include <string>

#include <gtest/gtest.h>

#include "core/cpu_features.h"
#include "isa_test_util.h"
#include "optim/adamw.h"

namespace lt::test {

inline constexpr AdamWKernel kKernelVariants[] = {AdamWKernel::Scalar, AdamWKernel::Avx2, AdamWKernel::Avx512NoVbmi,
                                                  AdamWKernel::Avx512};

inline std::string variant_label(AdamWKernel k) {
  switch (k) {
    case AdamWKernel::Auto: return "auto";
    case AdamWKernel::Scalar: return "scalar";
    case AdamWKernel::Avx2: return "avx2";
    case AdamWKernel::Avx512NoVbmi: return "avx512 without vbmi/bf16";
    case AdamWKernel::Avx512: return "avx512 (+vbmi+bf16 where present)";
  }
  return "?";
}

inline Isa variant_isa(AdamWKernel k) {
  switch (k) {
    case AdamWKernel::Avx2: return Isa::Avx2;
    case AdamWKernel::Avx512:
    case AdamWKernel::Avx512NoVbmi: return Isa::Avx512;
    default: return Isa::Scalar;
  }
}

// "" when the variant runs here as itself. Avx512 on a CPU without VBMI + BF16 would run
// the Avx512NoVbmi kernels again, so it is skipped with that reason.
inline std::string variant_skip_reason(AdamWKernel k) {
  const std::string why = isa_skip_reason(variant_isa(k));
  if (!why.empty()) return why;
  const CpuFeatures& f = cpu_features();
  if (k == AdamWKernel::Avx512 && !(f.avx512vbmi && f.avx512bf16))
    return "this CPU lacks avx512vbmi or avx512bf16 (avx512 runs the kernels tested without them)";
  return "";
}

// body(AdamWKernel) for each runnable variant (skipped ones printed with the reason);
// failures name the variant.
template <class Body>
void for_each_kernel_variant(Body&& body) {
  for (AdamWKernel k : kKernelVariants) {
    const std::string why = variant_skip_reason(k);
    if (!why.empty()) {
      std::cout << "[  SKIP VARIANT ] " << variant_label(k) << ": " << why << std::endl;
      continue;
    }
    SCOPED_TRACE("AdamW kernels " + std::string(adamw_kernels(k).name));
    body(k);
  }
}

}  // namespace lt::test
