// Rotary position embedding frequencies, with Hugging Face semantics (rope_type default,
// linear, llama3). Rotation pairs follow HF's "rotate_half" layout: element j of a head
// pairs with element j + head_dim/2, both rotated by angle position * inv_freq[j].
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace lt {

// head_dim/2 inverse frequencies: theta^(-2j/head_dim), then scaled per c.rope_scaling
// (with partial RoPE, rotary/2 of them over rotary = head_dim * partial_rotary_factor).
// Computed in double (transformers computes them in fp32; they agree to fp32 rounding).
// local: the sliding layers' RoPE (c.local_rope_theta/scaling) when c.local_rope is set
// (Gemma 3); otherwise, and for local = false, rope_theta/rope_scaling.
std::vector<double> rope_inv_freq(const ModelConfig& c, bool local = false);

// The channels of each head that RoPE rotates: head_dim, or its partial_rotary_factor.
int64_t rotary_dim(const ModelConfig& c);

// cos/sin: [seq, rotary_dim/2] row-major, for positions 0..seq-1. Angles are computed in
// double and rounded once to float, so large positions lose no accuracy.
void rope_tables(float* cos, float* sin, const ModelConfig& c, int64_t seq, bool local = false);

}  // namespace lt
