// The Gated DeltaNet token mixer: glue between the dispatched kernels (linear, causal conv,
// gated delta rule, its gates, gated RMSNorm), every step through the kernel table: the
// q | k | v split of the convolution's output (and the reverse interleave of their
// gradients), beta and the decay g (kernels/cpu/delta_rule_gates.h) and their gradients
// into in_proj_b, in_proj_a, dt_bias and A_log.
#include "layers/linear_attention_mixer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "model/hybrid_layers.h"

namespace lt {

namespace {

void check_shape(const LinearMixerShape& s) {
  const std::string where = "Gated DeltaNet token mixer";
  auto positive = [&](int64_t v, const char* name) {
    if (v <= 0)
      throw Error(std::string(name) + " is " + std::to_string(v), where,
                  std::string("pass a positive ") + name + " (for the la_* sizes, check the config's linear_* fields)");
  };
  positive(s.batch, "batch");
  positive(s.seq, "seq");
  positive(s.hidden, "hidden");
  positive(s.la.key_heads, "linear_num_key_heads");
  positive(s.la.value_heads, "linear_num_value_heads");
  positive(s.la.key_head_dim, "linear_key_head_dim");
  positive(s.la.value_head_dim, "linear_value_head_dim");
  positive(s.la.conv_kernel, "linear_conv_kernel_dim");
  positive(s.chunk, "chunk");
  if (!(s.norm_eps > 0))
    throw Error("norm_eps is " + std::to_string(s.norm_eps), where, "pass the config's rms_norm_eps (> 0)");
  // The kernels check the rest (value heads a multiple of key heads, the conv kernel's
  // upper limit) and name the field.
}

GatedDeltaShape delta_shape(const LinearMixerShape& s) {
  return GatedDeltaShape{s.batch, s.seq, s.la.key_heads, s.la.value_heads, s.la.key_head_dim,
                         s.la.value_head_dim, s.chunk};
}
CausalConvShape conv_shape(const LinearMixerShape& s) {
  return CausalConvShape{s.batch, s.seq, s.la.conv_dim(), s.la.conv_kernel};
}

// The backward workspace, in this order (sizes in floats):
//   dz [T*Vd], dg, dbeta, a [T*Hv each]   live to the end (the input projections' backward)
//   dqkv [T*Cc]  first dq | dk | dv from the delta rule (three arrays), then, after they
//                are interleaved into dconv, the convolution's input gradient
//   shared: first d_o [T*Vd] + max(dy [T*Vd] + the norm's scratch, the delta rule's
//           scratch); once the delta rule is done, dconv [T*Cc]
struct BackwardLayout {
  size_t dz, dg, dbeta, a, dqkv, shared, d_o, dy, norm_ws, rule_ws, dconv, total;
};
BackwardLayout backward_layout(const KernelTable& k, const LinearMixerShape& s) {
  const size_t T = size_t(s.tokens()), Vd = size_t(s.la.value_dim()), Hv = size_t(s.la.value_heads),
               Cc = size_t(s.la.conv_dim());
  const size_t norm_ws = k.gated_rmsnorm_backward_workspace_floats(int64_t(T * Hv), s.la.value_head_dim);
  const size_t rule_ws = k.gated_delta_rule_backward_workspace_floats(delta_shape(s));
  BackwardLayout l{};
  l.dz = 0;
  l.dg = l.dz + T * Vd;
  l.dbeta = l.dg + T * Hv;
  l.a = l.dbeta + T * Hv;
  l.dqkv = l.a + T * Hv;
  l.shared = l.dqkv + T * Cc;
  l.d_o = l.shared;
  l.dy = l.d_o + T * Vd;
  l.norm_ws = l.dy + T * Vd;
  l.rule_ws = l.d_o + T * Vd;
  l.dconv = l.shared;
  const size_t shared = std::max(T * Vd + std::max(T * Vd + norm_ws, rule_ws), T * Cc);
  l.total = l.shared + shared;
  return l;
}

// The forward workspace: the convolution's output [T*Cc] until it is split, then the delta
// rule's scratch (the two are never live together).
size_t forward_workspace(const KernelTable& k, const LinearMixerShape& s) {
  return std::max(size_t(s.tokens() * s.la.conv_dim()), k.gated_delta_rule_forward_workspace_floats(delta_shape(s)));
}

// The small tensors are always fp32; a projection matrix may come as fp32, as bf16 (a bf16
// weight slot holds only that), or both.
void check_weights(const BlockTensors& w, const BlockTensorsBf16& wb, const char* what) {
  LT_ASSERT((w.la_in_proj_qkv || wb.la_in_proj_qkv) && (w.la_in_proj_z || wb.la_in_proj_z) &&
                (w.la_in_proj_b || wb.la_in_proj_b) && (w.la_in_proj_a || wb.la_in_proj_a) &&
                (w.la_out_proj || wb.la_out_proj) && w.la_conv1d && w.la_dt_bias && w.la_A_log && w.la_norm,
            std::string(what) + ": a Gated DeltaNet layer without its la_* tensors");
}

}  // namespace

LinearMixerShape linear_mixer_shape(const BlockShape& b) {
  LinearMixerShape s;
  s.batch = b.batch;
  s.seq = b.seq;
  s.hidden = b.hidden;
  s.la = b.linear;
  s.norm_eps = b.eps;
  s.chunk = kDeltaRuleChunk;
  return s;
}

LinearMixerShape linear_mixer_shape(const ModelConfig& c, int64_t batch, int64_t seq) {
  return linear_mixer_shape(block_shape(c, batch, seq));
}

size_t linear_mixer_workspace_floats(const KernelTable& k, const LinearMixerShape& s) {
  check_shape(s);
  return std::max(forward_workspace(k, s), backward_layout(k, s).total);
}

void linear_mixer_forward(const KernelTable& k, float* out, BlockSaved& saved, LinearInput h,
                          const BlockTensors& w, const BlockTensorsBf16& wb, const LinearMixerShape& s, Precision p,
                          float* workspace) {
  check_shape(s);
  check_weights(w, wb, "linear_mixer_forward");
  LT_ASSERT(out && h.data && workspace && saved.conv_in && saved.conv_q && saved.conv_k && saved.conv_v &&
            saved.z && saved.beta && saved.decay && saved.chunk_states && saved.delta_out &&
            saved.delta_norm_rstd && saved.delta_gated);
  const int64_t T = s.tokens(), C = s.hidden, Kd = s.la.key_dim(), Vd = s.la.value_dim(),
                Hv = s.la.value_heads, Cc = s.la.conv_dim();

  k.linear_forward(saved.conv_in, h, w.la_in_proj_qkv, wb.la_in_proj_qkv, nullptr, T, C, Cc, p);
  float* conv_out = workspace;
  k.causal_conv1d_silu_forward(conv_out, saved.conv_in, w.la_conv1d, conv_shape(s));
  // Per token the channels are q | k | v (transformers' torch.split of the conv output).
  k.copy_rows(saved.conv_q, Kd, conv_out, Cc, T, Kd);
  k.copy_rows(saved.conv_k, Kd, conv_out + Kd, Cc, T, Kd);
  k.copy_rows(saved.conv_v, Vd, conv_out + 2 * Kd, Cc, T, Vd);

  k.linear_forward(saved.z, h, w.la_in_proj_z, wb.la_in_proj_z, nullptr, T, C, Vd, p);
  // b and a land in the saved beta and decay, which are then mapped in place.
  k.linear_forward(saved.beta, h, w.la_in_proj_b, wb.la_in_proj_b, nullptr, T, C, Hv, p);
  k.linear_forward(saved.decay, h, w.la_in_proj_a, wb.la_in_proj_a, nullptr, T, C, Hv, p);
  k.delta_rule_gates_forward(saved.beta, saved.decay, saved.beta, saved.decay, w.la_A_log, w.la_dt_bias, T, Hv);

  k.gated_delta_rule_forward(saved.delta_out, nullptr, saved.chunk_states, saved.conv_q, saved.conv_k,
                           saved.conv_v, saved.decay, saved.beta, nullptr, delta_shape(s), workspace);
  k.gated_rmsnorm_forward(saved.delta_gated, saved.delta_norm_rstd, saved.delta_out, saved.z, w.la_norm,
                        T * Hv, s.la.value_head_dim, s.norm_eps);
  // The gated norm's output is out_proj's input alone (its backward reads delta_out and z).
  const LinearInput gated{saved.delta_gated, k.round_gemm_input(saved.delta_gated, T * Vd, p)};
  k.linear_forward(out, gated, w.la_out_proj, wb.la_out_proj, nullptr, T, Vd, C, p);
}

void linear_mixer_backward(const KernelTable& k, float* dh, BlockTensors& g, const float* d_out, LinearInput h,
                           const BlockTensors& w, const BlockTensorsBf16& wb, const BlockSaved& saved,
                           const LinearMixerShape& s, Precision p, float* workspace) {
  check_shape(s);
  check_weights(w, wb, "linear_mixer_backward");
  check_weights(g, BlockTensorsBf16{}, "linear_mixer_backward (gradients)");
  LT_ASSERT(dh && d_out && h.data && workspace);
  const int64_t T = s.tokens(), C = s.hidden, Kd = s.la.key_dim(), Vd = s.la.value_dim(),
                Hv = s.la.value_heads, Cc = s.la.conv_dim(), dv = s.la.value_head_dim;
  const BackwardLayout l = backward_layout(k, s);
  float *dz = workspace + l.dz, *dg = workspace + l.dg, *dbeta = workspace + l.dbeta,
        *a = workspace + l.a, *dqkv = workspace + l.dqkv, *d_o = workspace + l.d_o, *dy = workspace + l.dy,
        *dconv = workspace + l.dconv;
  float *dq = dqkv, *dk = dqkv + T * Kd, *dvv = dqkv + 2 * T * Kd;

  // out = y · out_proj^T
  const LinearInput gated{saved.delta_gated, k.gemm_inputs_rounded(p)};  // as forward left it
  k.linear_backward(dy, g.la_out_proj, nullptr, d_out, gated, w.la_out_proj, wb.la_out_proj, T, Vd, C, false, p);
  k.gated_rmsnorm_backward(d_o, dz, g.la_norm, dy, saved.delta_out, saved.z, w.la_norm, saved.delta_norm_rstd,
                         T * Hv, dv, workspace + l.norm_ws);
  k.gated_delta_rule_backward(dq, dk, dvv, dg, dbeta, nullptr, d_o, nullptr, saved.conv_q, saved.conv_k,
                            saved.conv_v, saved.decay, saved.beta, saved.chunk_states, delta_shape(s),
                            workspace + l.rule_ws);
  // dconv overlays d_o and the delta rule's scratch, both dead now.
  k.copy_rows(dconv, Cc, dq, Kd, T, Kd);
  k.copy_rows(dconv + Kd, Cc, dk, Kd, T, Kd);
  k.copy_rows(dconv + 2 * Kd, Cc, dvv, Vd, T, Vd);
  // dq | dk | dv are consumed: dqkv now takes the gradient of in_proj_qkv's output.
  k.causal_conv1d_silu_backward(dqkv, g.la_conv1d, dconv, saved.conv_in, w.la_conv1d, conv_shape(s));

  // a = h · in_proj_a^T is recomputed (T*Hv floats; cheaper than saving it) for the
  // softplus derivative; the gates' backward then turns dbeta into db in place, a into da,
  // and adds into the dt_bias and A_log gradients.
  k.linear_forward(a, h, w.la_in_proj_a, wb.la_in_proj_a, nullptr, T, C, Hv, p);
  k.delta_rule_gates_backward(dbeta, a, g.la_dt_bias, g.la_A_log, dbeta, dg, a, saved.beta, saved.decay, w.la_A_log,
                              w.la_dt_bias, T, Hv);

  k.linear_backward(dh, g.la_in_proj_qkv, nullptr, dqkv, h, w.la_in_proj_qkv, wb.la_in_proj_qkv, T, C, Cc,
                  false, p);
  k.linear_backward(dh, g.la_in_proj_z, nullptr, dz, h, w.la_in_proj_z, wb.la_in_proj_z, T, C, Vd, true, p);
  k.linear_backward(dh, g.la_in_proj_b, nullptr, dbeta, h, w.la_in_proj_b, wb.la_in_proj_b, T, C, Hv, true, p);
  k.linear_backward(dh, g.la_in_proj_a, nullptr, a, h, w.la_in_proj_a, wb.la_in_proj_a, T, C, Hv, true, p);
}

}  // namespace lt
