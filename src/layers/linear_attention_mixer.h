// The token mixer of a Qwen3.5/3.6 Gated DeltaNet layer (transformers'
// Qwen3_5GatedDeltaNet, without a cache and without padding), forward and backward, over
// views: the decoder block (layers/decoder_block.h) runs it between the input norm and the
// residual add, in place of attention. h is the input norm's output [T, C], T = B*S:
//
//   qkv = h·in_proj_qkv^T   [T, 2*Hk*dk + Hv*dv]        -> saved conv_in
//   c   = silu(causal_conv1d(qkv, conv1d))               -> split q | k | v (per token, in
//         that order: Hk*dk, Hk*dk, Hv*dv channels)     -> saved conv_q, conv_k, conv_v
//   z   = h·in_proj_z^T     [T, Hv*dv]                   -> saved z
//   beta = sigmoid(h·in_proj_b^T)   [T, Hv]              -> saved beta
//   g    = -exp(A_log) * softplus(h·in_proj_a^T + dt_bias)   [T, Hv]   -> saved decay
//   o    = gated_delta_rule(q, k, v, g, beta), chunked, zero initial state, q/k L2-normed
//          in the kernel (kernels/cpu/gated_delta_rule.h)  [T, Hv*dv] -> saved delta_out,
//          and the state entering each chunk               -> saved chunk_states
//   y    = gated_rmsnorm(o per value head, z; norm, eps)  [T, Hv*dv]   -> saved
//          delta_norm_rstd [T*Hv], delta_gated (out_proj's input)
//   out  = y·out_proj^T     [T, C]
//
// Every matmul goes through kernels/cpu/linear.h with the step's precision (bf16 weights
// from the BlockTensorsBf16 views under Precision::BF16; null views are rounded on the
// fly). The elementwise math (sigmoid, softplus, exp) is fp32, as transformers computes it
// in a float32 model. Results do not depend on the thread count.
//
// Saved tensor sizes, in floats (fp32 whatever the precision):
//   conv_in T*conv_dim; conv_q, conv_k T*Hk*dk; conv_v, z, delta_out, delta_gated T*Hv*dv;
//   beta, decay T*Hv; chunk_states B*Hv*ceil(S/chunk)*dk*dv; delta_norm_rstd T*Hv.
// The block binds them onto its saved buffer (model/hybrid_layers.cpp's spec table lists
// the same tensors in that order).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/kernel_table.h"
#include "layers/decoder_block.h"
#include "model/config.h"
#include "model/parameters.h"

namespace lt {

struct LinearMixerShape {
  int64_t batch = 0, seq = 0, hidden = 0;
  LinearAttentionShape la;
  float norm_eps = 0;  // the gated norm's (rms_norm_eps)
  int64_t chunk = 64;  // the delta rule's chunk (model/hybrid_layers.h kDeltaRuleChunk)
  int64_t tokens() const { return batch * seq; }
};
LinearMixerShape linear_mixer_shape(const ModelConfig& c, int64_t batch, int64_t seq);
LinearMixerShape linear_mixer_shape(const BlockShape& s);  // the decoder block's shape

// Scratch the two passes need beyond the saved tensors (the larger of the two), in floats.
size_t linear_mixer_workspace_floats(const KernelTable& k, const LinearMixerShape& s);

// Both passes run on the kernels of k (kernels/kernel_table.h), whose workspace needs
// linear_mixer_workspace_floats counts.
// out [T, C] is overwritten. w: the la_* views; wb: their bf16 copies (read under BF16).
void linear_mixer_forward(const KernelTable& k, float* out, BlockSaved& saved, LinearInput h,
                          const BlockTensors& w, const BlockTensorsBf16& wb, const LinearMixerShape& s,
                          Precision precision, float* workspace);

// dh [T, C] is overwritten with the gradient of the mixer's input h; the la_* gradients in
// g accumulate (+=). saved: what forward saved for the same h and weights.
void linear_mixer_backward(const KernelTable& k, float* dh, BlockTensors& g, const float* d_out, LinearInput h,
                           const BlockTensors& w, const BlockTensorsBf16& wb, const BlockSaved& saved,
                           const LinearMixerShape& s, Precision precision, float* workspace);

}  // namespace lt
