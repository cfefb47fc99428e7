// CUDA kernel of the fused 8-bit AdamW step (the GPU twin of optim/adamw_kernels_avx512.cpp).
//
// One thread block per quantization block, one thread per element. The arithmetic is the
// sequence of adamw_math.h with explicit round-to-nearest intrinsics (__fmaf_rn, __fmul_rn,
// __fdiv_rn, __fsqrt_rn), so nvcc cannot contract or approximate anything and the result
// equals the CPU kernels' bit for bit. The nearest code is the same eight-level search over
// the same midpoint tree, held in shared memory.
//
// This header has no CUDA types so plain C++ can include it; it is compiled only when CMake
// finds nvcc (LT_HAVE_CUDA), and its functions throw lt-free std::runtime_error on CUDA errors.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_memory.h"  // device_count

namespace lt::cuda {

struct AdamW8DeviceArgs {
  float* param;            // [n] device
  const float* grad;       // [n] device, fp32 (or null when grad_bf16 is set)
  const uint16_t* grad_bf16;  // [n] device, bf16 bits
  uint16_t* out_bf16;      // [n] device, bf16 bits of the new param, or null
  uint8_t* m_code;         // [n]
  uint8_t* v_code;         // [n]
  float* m_absmax;         // [ceil(n / block)]
  float* v_absmax;         // [ceil(n / block)]
  int* skipped_blocks;     // [1] device counter, incremented per non-finite block
  int64_t n;
  int block;               // multiple of 32, <= 1024
};

struct AdamW8DeviceConsts {  // the fields of lt::AdamWStepConsts, same order
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps, decay, step_size, inv_sqrt_bc2, clip;
};

struct AdamW8DeviceMaps {  // value and tree arrays of the signed (m) and unsigned (v) maps
  const float* m_value;  // [256] host pointers; copied to the device per launch
  const float* m_tree;
  const float* v_value;
  const float* v_tree;
};

// Launches the step on `stream` (a cudaStream_t; null = default stream).
void adamw8_step(const AdamW8DeviceArgs& a, const AdamW8DeviceConsts& c, const AdamW8DeviceMaps& maps,
                 void* stream);

// Test helper: copies host arrays to the device, runs one step, copies the results back.
// grad_bf16 may be null (then grad is used); out_bf16 may be null. Returns skipped blocks.
int adamw8_step_host(float* param, const float* grad, const uint16_t* grad_bf16, uint16_t* out_bf16,
                     uint8_t* m_code, uint8_t* v_code, float* m_absmax, float* v_absmax, int64_t n, int block,
                     const AdamW8DeviceConsts& c, const AdamW8DeviceMaps& maps);

}  // namespace lt::cuda
