// CPU kernels of the fused AdamW step, over a range of blocks of one tensor.
//
// A block is `block` consecutive elements (the last one may be shorter). Per block the
// kernel makes one pass over memory:
//   8-bit: read grad, the m/v codes and absmax -> fp32 m, v into an L1 scratch; then read
//          p, write p, the bf16 copy, the new codes and absmax.
//   fp32:  read grad, m, v -> new m, v into scratch; then read p, write p, m, v, bf16 copy.
// A block whose new v is NaN or Inf (a NaN/Inf gradient, or g^2 overflowing) is left
// entirely unchanged and counted; the kernels return that count. Blocks are independent,
// so any split of blocks over threads gives bitwise the same result, and the scalar and
// AVX-512 kernels evaluate the same fp32 operations in the same order (adamw_math.h), so
// they agree bitwise too (tested).
#pragma once

#include <cstdint>

#include "core/dtype.h"
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

// Blocks [first_block, last_block). Return the number of skipped (non-finite) blocks.
int64_t adamw8_blocks_scalar(const AdamWTensorArgs& a, const AdamW8State& s, const AdamWStepConsts& c,
                             int64_t first_block, int64_t last_block);
int64_t adamw32_blocks_scalar(const AdamWTensorArgs& a, const AdamW32State& s, const AdamWStepConsts& c,
                              int64_t first_block, int64_t last_block);
// AVX-512 (F, BW, DQ, VL). Call only when cpu_has_avx512() is true. ext: use AVX512-VBMI
// (dequantize the codes by byte table lookups, 64 codes per lookup, instead of fp32
// permutes) and AVX512-BF16 (the bf16 copy by vcvtneps2bf16); only when
// cpu_has_avx512_ext() is true. Either way the result is bitwise the scalar one.
int64_t adamw8_blocks_avx512(const AdamWTensorArgs& a, const AdamW8State& s, const AdamWStepConsts& c,
                             int64_t first_block, int64_t last_block, bool ext);
int64_t adamw32_blocks_avx512(const AdamWTensorArgs& a, const AdamW32State& s, const AdamWStepConsts& c,
                              int64_t first_block, int64_t last_block);

// The AVX-512 kernels' nearest-code path over n values (tests: it must equal
// quantize_nearest for every input). Call only when cpu_has_avx512() is true.
struct QuantMap;
void quantize_nearest_avx512(const QuantMap& map, const float* x, uint8_t* code, int64_t n);

// The VBMI dequantization over n codes: out[i] = map.value[code[i]] * absmax (tests: it must
// equal the table). Call only when cpu_has_avx512_vbmi() is true.
void dequantize_avx512_vbmi(const QuantMap& map, const uint8_t* code, float absmax, int64_t n, float* out);

// Run-time checks of the CPU (not of the compiler flags).
bool cpu_has_avx512();
bool cpu_has_avx512_vbmi();  // cpu_has_avx512() and AVX512-VBMI
bool cpu_has_avx512_ext();   // cpu_has_avx512() and AVX512-VBMI and AVX512-BF16

}  // namespace lt
