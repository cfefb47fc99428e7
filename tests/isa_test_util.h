// Runs a test body once per ISA level of the kernels (core/cpu_features.h): scalar, avx2,
// avx512. Levels this machine cannot run (or that LT_CPU caps away) are skipped with the
// reason printed, never silently. Within a level, results may be compared bitwise; across
// levels only with derived bounds (FMA contraction and vector width change the rounding).
#pragma once

#include <iostream>
#include <string>

#include <gtest/gtest.h>

#include "core/cpu_features.h"

namespace lt::test {

// Why `isa` cannot run in this process ("" when it can).
inline std::string isa_skip_reason(Isa isa) {
  const std::string missing = isa_missing(isa);
  if (!missing.empty()) return missing;
  if (isa > isa_cap()) return "LT_CPU caps the kernels at " + std::string(isa_name(isa_cap()));
  return "";
}

// body(Isa) under ScopedIsaCap(isa), for each level that can run; failures name the level.
template <class Body>
void for_each_isa(Body&& body) {
  for (Isa isa : kAllIsas) {
    const std::string why = isa_skip_reason(isa);
    if (!why.empty()) {
      std::cout << "[  SKIP ISA ] " << isa_name(isa) << ": " << why << std::endl;
      continue;
    }
    SCOPED_TRACE("kernels at ISA level " + std::string(isa_name(isa)));
    const ScopedIsaCap cap(isa);
    body(isa);
  }
}

}  // namespace lt::test
