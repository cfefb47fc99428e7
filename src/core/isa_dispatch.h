// The one dispatch mechanism for CPU kernels. An op family declares a table of function
// pointers (its kernels) and gets one table per ISA level, in the namespaces
// lt::isa_scalar, lt::isa_avx2 and lt::isa_avx512:
//
//   // kernels/cpu/swiglu.h
//   struct SwigluKernels { void (*forward)(...); void (*backward)(...); };
//   LT_ISA_TABLE(SwigluKernels, kSwigluKernels)
//
//   // swiglu.cpp: the public functions pick the table of the level in force
//   void swiglu_forward(...) { LT_ISA_PICK(kSwigluKernels).forward(...); }
//
// Each table is defined in a file compiled for its level (core/isa_target.h): either a
// `*_simd.cpp` source, which the build compiles once per level (plain loops the compiler
// vectorizes for each), or a hand-written file for one level (`*_avx2.cpp`, `*_avx512.cpp`
// with intrinsics). A family whose table is the same code for two levels may define one
// table as a copy of the other.
//
// The pick reads active_isa() (one relaxed atomic load) per call: the choice is made once,
// at start-up, from cpuid and LT_CPU, and tests lower it with ScopedIsaCap.
#pragma once

#include "core/cpu_features.h"

namespace lt {

template <class Table>
const Table& isa_pick(const Table& scalar, const Table& avx2, const Table& avx512) {
  switch (active_isa()) {
    case Isa::Avx512: return avx512;
    case Isa::Avx2: return avx2;
    case Isa::Scalar: break;
  }
  return scalar;
}

}  // namespace lt

// Declares Type `name` in the three level namespaces (use inside namespace lt).
#define LT_ISA_TABLE(Type, name)              \
  namespace isa_scalar {                      \
  extern const Type name;                     \
  }                                           \
  namespace isa_avx2 {                        \
  extern const Type name;                     \
  }                                           \
  namespace isa_avx512 {                      \
  extern const Type name;                     \
  }

// The table of the level in force.
#define LT_ISA_PICK(name) ::lt::isa_pick(::lt::isa_scalar::name, ::lt::isa_avx2::name, ::lt::isa_avx512::name)
