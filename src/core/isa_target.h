// Compiles the rest of this file for one ISA level. Include it after every other header
// (standard and project ones: what they define stays baseline code, so no inline function
// or template instance built with wider instructions can be picked by the linker for a
// caller on a smaller CPU), and include core/isa_target_end.h at the end of the file.
//
// The level is LT_ISA_TARGET: 0 scalar, 1 avx2, 2 avx512. The build defines it for
// `*_simd.cpp` sources, which it compiles once per level; a hand-written file for one
// level defines it itself before the include. Put the file's code in namespace
// lt::LT_ISA_NS (isa_scalar, isa_avx2, isa_avx512), where LT_ISA_TABLE declared its table.
//
// Inside, `#pragma omp simd` loops vectorize to the level's width (AVX-512 at 512 bits),
// and the level's intrinsics are usable. Functions defined before this header (baseline)
// inline into the level's functions.
#if !defined(LT_ISA_TARGET)
#error "define LT_ISA_TARGET (0 scalar, 1 avx2, 2 avx512) before including core/isa_target.h"
#endif

#if LT_ISA_TARGET == 0
#define LT_ISA_NS isa_scalar
#define LT_ISA_TARGET_FLAGS ""
#elif LT_ISA_TARGET == 1
#define LT_ISA_NS isa_avx2
#define LT_ISA_TARGET_FLAGS "avx2,fma,f16c,bmi,bmi2,lzcnt,movbe"
#elif LT_ISA_TARGET == 2
#define LT_ISA_NS isa_avx512
#if defined(__clang__)
// clang ignores a whole target attribute that names prefer-vector-width (a GCC-only
// target option); its auto-vectorizer width is a command-line choice there.
#define LT_ISA_TARGET_FLAGS "avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,avx512f,avx512bw,avx512dq,avx512vl"
#else
#define LT_ISA_TARGET_FLAGS \
  "avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512"
#endif
#else
#error "LT_ISA_TARGET must be 0, 1 or 2"
#endif

#if LT_ISA_TARGET != 0
#if defined(__clang__)
#define LT_ISA_PRAGMA_(x) _Pragma(#x)
#define LT_ISA_PRAGMA(flags) \
  LT_ISA_PRAGMA_(clang attribute push(__attribute__((target(flags))), apply_to = function))
LT_ISA_PRAGMA(LT_ISA_TARGET_FLAGS)
#undef LT_ISA_PRAGMA
#undef LT_ISA_PRAGMA_
#else
#pragma GCC push_options
#define LT_ISA_PRAGMA_(x) _Pragma(#x)
#define LT_ISA_PRAGMA(flags) LT_ISA_PRAGMA_(GCC target(flags))
LT_ISA_PRAGMA(LT_ISA_TARGET_FLAGS)
#undef LT_ISA_PRAGMA
#undef LT_ISA_PRAGMA_
#endif
#endif
