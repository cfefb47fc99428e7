// CPU kernels of the fused AdamW step, over a range of blocks of one tensor, one table per
// ISA level (core/isa_dispatch.h): scalar (adamw_kernels_scalar.cpp), AVX2 + FMA
// (adamw_kernels_avx2.cpp), AVX-512 (adamw_kernels_avx512.cpp, with a second table that
// also uses AVX512-VBMI and AVX512-BF16).
//
// A block is `block` consecutive elements (the last one may be shorter). Per block the
// kernel makes one pass over memory:
//   8-bit: read grad, the m/v codes and absmax -> fp32 m, v into an L1 scratch; then read
//          p, write p, the bf16 copy, the new codes and absmax.
//   fp32:  read grad, m, v -> new m, v into scratch; then read p, write p, m, v, bf16 copy.
// A block whose new v is NaN or Inf (a NaN/Inf gradient, or g^2 overflowing) is left
// entirely unchanged and counted; the kernels return that count. Blocks are independent,
// so any split of blocks over threads gives bitwise the same result, and every table
// evaluates the same fp32 operations in the same order (adamw_math.h; an FMA exactly where
// the scalar kernel calls std::fma), so all of them agree bitwise (tested).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/isa_dispatch.h"
#include "optim/adamw_math.h"

namespace lt {

// The largest block the kernels' stack scratch holds.
inline constexpr int64_t kMaxAdamWBlock = 4096;

struct AdamWTensorArgs {
  float* param = nullptr;          // [n] fp32 master weights, updated in place
  const float* grad_f32 = nullptr; // [n] gradient: exactly one of grad_f32 / grad_bf16
  const bf16* grad_bf16 = nullptr;
  bf16* out_bf16 = nullptr;        // [n] compute copy written in the same pass, or null
  int64_t n = 0;
  int64_t block = 256;             // multiple of 16, <= kMaxAdamWBlock
};

struct AdamW8State {
  uint8_t* m_code = nullptr;  // [n] codes into signed_dynamic_map()
  uint8_t* v_code = nullptr;  // [n] codes into unsigned_dynamic_map()
  float* m_absmax = nullptr;  // [ceil(n / block)]
  float* v_absmax = nullptr;  // [ceil(n / block)]
};

struct AdamW32State {
  float* m = nullptr;  // [n]
  float* v = nullptr;  // [n]
};

struct QuantMap;

// One variant's kernels. The two map helpers are the pieces of the 8-bit kernel that the
// tests check exhaustively on their own: each must equal the scalar definition bit for bit.
struct AdamWKernels {
  const char* name;  // "scalar", "avx2", "avx512", "avx512+vbmi+bf16"
  // Blocks [first_block, last_block). Return the number of skipped (non-finite) blocks.
  int64_t (*adamw8)(const AdamWTensorArgs& a, const AdamW8State& s, const AdamWStepConsts& c,
                    int64_t first_block, int64_t last_block);
  int64_t (*adamw32)(const AdamWTensorArgs& a, const AdamW32State& s, const AdamWStepConsts& c,
                     int64_t first_block, int64_t last_block);
  // code[i] = quantize_nearest(map, x[i]) for n non-NaN values, by the kernel's own path.
  void (*quantize)(const QuantMap& map, const float* x, uint8_t* code, int64_t n);
  // out[i] = map.value[code[i]] * absmax, by the kernel's own lookup.
  void (*dequantize)(const QuantMap& map, const uint8_t* code, float absmax, int64_t n, float* out);
};

LT_ISA_TABLE(AdamWKernels, kAdamWKernels)

namespace isa_avx512 {
// The AVX-512 table with the VBMI dequantization and the vcvtneps2bf16 copy: only where
// cpu_features() has avx512vbmi and avx512bf16.
extern const AdamWKernels kAdamWKernelsVbmiBf16;
}  // namespace isa_avx512

}  // namespace lt
