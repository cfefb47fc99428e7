// Rotary position embedding, Hugging Face "rotate_half" layout: for i < D/2 the pair is
// (x[i], x[i + D/2]):
//   y[i]       = x[i] * cos[s,i] - x[i+D/2] * sin[s,i]
//   y[i + D/2] = x[i+D/2] * cos[s,i] + x[i] * sin[s,i]
// x is [B*S, H, D], token b*S+s sits at position s, or at positions[b*S+s] when
// positions ([B*S], each in [0, S)) is given (documents packed into a row, each counted
// from 0). cos/sin tables are [S, D/2] (built by model/rope_frequencies.h). Both
// directions work in place; backward applies the transposed rotation (sin -> -sin) to
// the incoming gradient.
// Partial RoPE (Qwen3.5): with rotary < D only each head's first `rotary` channels rotate,
// pairing i with i + rotary/2 over tables of [S, rotary/2]; the rest pass through
// (transformers' apply_rotary_pos_emb with cos narrower than the head). rotary 0 means D.
#pragma once

#include <cstdint>

#include "core/isa_dispatch.h"

namespace lt {

// Pick the kernels of the ISA level in force (core/isa_dispatch.h).
void rope_forward(float* x, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H,
                  int64_t D, const int32_t* positions = nullptr, int64_t rotary = 0);
void rope_backward(float* dx, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H,
                   int64_t D, const int32_t* positions = nullptr, int64_t rotary = 0);

// One table per ISA level, compiled from rope_simd.cpp; each rotates x in place.
struct RopeKernels {
  // Each of the B*S*H rows is D floats apart; its first `rotary` channels rotate.
  void (*forward)(float* x, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H,
                  int64_t D, int64_t rotary, const int32_t* positions);
  void (*backward)(float* dx, const float* cos, const float* sin, int64_t B, int64_t S,
                   int64_t H, int64_t D, int64_t rotary, const int32_t* positions);
};
LT_ISA_TABLE(RopeKernels, kRopeKernels)

namespace ref {
template <typename T>
void rope_apply(T* x, const T* cos, const T* sin, int64_t B, int64_t S, int64_t H, int64_t D,
                T sign, const int32_t* positions = nullptr, int64_t rotary = 0) {
  const int64_t half = (rotary > 0 ? rotary : D) / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        T* v = x + ((b * S + s) * H + h) * D;
        const int64_t p = positions ? positions[b * S + s] : s;
        for (int64_t i = 0; i < half; ++i) {
          const T c = cos[p * half + i], sn = sign * sin[p * half + i];
          const T a = v[i], bb = v[i + half];
          v[i] = a * c - bb * sn;
          v[i + half] = bb * c + a * sn;
        }
      }
}
}  // namespace ref

}  // namespace lt
