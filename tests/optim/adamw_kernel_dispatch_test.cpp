// Which AdamW kernels run: Auto follows the ISA level in force (core/cpu_features.h), a
// forced variant the CPU lacks or LT_CPU caps away is an lt::Error, and the name says what
// runs.
#include <gtest/gtest.h>

#include <string>

#include "adamw_kernel_variants.h"
#include "core/error.h"
#include "optim/adamw.h"

namespace lt {
namespace {

TEST(AdamWKernelDispatch, AutoFollowsActiveIsa) {
  test::for_each_isa([](Isa isa) {
    AdamW opt;
    const std::string name = opt.kernel_name();
    // "avx512" and "avx512+vbmi+bf16" both belong to the avx512 level.
    EXPECT_EQ(name.substr(0, name.find('+')), isa_name(isa));
    const CpuFeatures& f = cpu_features();
    if (isa == Isa::Avx512) {
      EXPECT_EQ(name == "avx512+vbmi+bf16", f.avx512vbmi && f.avx512bf16);
    }
  });
}

TEST(AdamWKernelDispatch, ForcedVariantRunsOrThrows) {
  for (AdamWKernel k : test::kKernelVariants) {
    const std::string why = test::isa_skip_reason(test::variant_isa(k));
    AdamWConfig cfg;
    cfg.kernel = k;
    if (!why.empty()) {
      EXPECT_THROW(AdamW{cfg}, Error) << test::variant_label(k) << ": " << why;
      continue;
    }
    const std::string name = AdamW(cfg).kernel_name();
    EXPECT_EQ(name.substr(0, name.find('+')), isa_name(test::variant_isa(k)));
    if (k == AdamWKernel::Avx512NoVbmi) {
      EXPECT_EQ(name, "avx512");
    }
  }
}

}  // namespace
}  // namespace lt
