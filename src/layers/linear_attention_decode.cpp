#include "layers/linear_attention_decode.h"

#include <algorithm>
#include <cmath>

namespace lt {

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// x * rsqrt(sum x^2 + 1e-6) * scale, in place (transformers' l2norm).
void l2_normalize(float* x, int64_t n, float scale) {
  float ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss + 1e-6f) * scale;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace

LinearAttentionDecoder::LinearAttentionDecoder(const ModelConfig& c)
    : s_(c.linear), C_(c.hidden_size), eps_(static_cast<float>(c.rms_norm_eps)) {
  history_.resize(static_cast<size_t>((s_.conv_kernel - 1) * s_.conv_dim()));
  state_.resize(static_cast<size_t>(s_.value_heads * s_.key_head_dim * s_.value_head_dim));
  qkv_.resize(s_.conv_dim());
  conv_.resize(s_.conv_dim());
  z_.resize(s_.value_dim());
  b_.resize(s_.value_heads);
  a_.resize(s_.value_heads);
  o_.resize(s_.value_dim());
  y_.resize(s_.value_dim());
  rstd_.resize(s_.value_heads);
}

void LinearAttentionDecoder::reset() {
  std::fill(history_.begin(), history_.end(), 0.0f);
  std::fill(state_.begin(), state_.end(), 0.0);
}

void LinearAttentionDecoder::step(float* out, const float* h, const BlockTensors& w, const BlockTensorsBf16& wb,
                                  Precision p) {
  const int64_t CD = s_.conv_dim(), K = s_.conv_kernel, Hv = s_.value_heads, dk = s_.key_head_dim,
                dv = s_.value_head_dim, KD = s_.key_dim(), group = s_.value_heads / s_.key_heads;
  kernels_->linear_forward(qkv_.data(), h, w.la_in_proj_qkv, wb.la_in_proj_qkv, nullptr, 1, C_, CD, p);
  kernels_->linear_forward(z_.data(), h, w.la_in_proj_z, wb.la_in_proj_z, nullptr, 1, C_, s_.value_dim(), p);
  kernels_->linear_forward(b_.data(), h, w.la_in_proj_b, wb.la_in_proj_b, nullptr, 1, C_, Hv, p);
  kernels_->linear_forward(a_.data(), h, w.la_in_proj_a, wb.la_in_proj_a, nullptr, 1, C_, Hv, p);

  // The convolution over the K-1 previous inputs and this one, then the history shifts.
  for (int64_t c = 0; c < CD; ++c) {
    float acc = 0;
    for (int64_t j = 0; j + 1 < K; ++j) acc += w.la_conv1d[c * K + j] * history_[j * CD + c];
    acc += w.la_conv1d[c * K + K - 1] * qkv_[c];
    conv_[c] = silu(acc);
  }
  if (K > 1) {
    std::copy(history_.begin() + CD, history_.end(), history_.begin());
    std::copy(qkv_.begin(), qkv_.end(), history_.end() - CD);
  }
  float* q = conv_.data();
  float* k = conv_.data() + KD;
  const float* v = conv_.data() + 2 * KD;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t hk = 0; hk < s_.key_heads; ++hk) {
    l2_normalize(q + hk * dk, dk, q_scale);
    l2_normalize(k + hk * dk, dk, 1.0f);
  }

  // beta over b_, the log-decay g over a_: the training forward's gates, bit for bit.
  kernels_->delta_rule_gates_forward(b_.data(), a_.data(), b_.data(), a_.data(), w.la_A_log, w.la_dt_bias, 1, Hv);
  for (int64_t hv = 0; hv < Hv; ++hv) {
    const float beta = b_[hv], g = a_[hv];
    const double decay = std::exp(static_cast<double>(g));
    const float* qh = q + (hv / group) * dk;
    const float* kh = k + (hv / group) * dk;
    const float* vh = v + hv * dv;
    double* S = state_.data() + hv * dk * dv;
    for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
    float* oh = o_.data() + hv * dv;
    // delta = beta (v - S^T k), then S += k delta^T and o = S^T q.
    for (int64_t e = 0; e < dv; ++e) {
      double mem = 0;
      for (int64_t d = 0; d < dk; ++d) mem += S[d * dv + e] * kh[d];
      const double delta = (vh[e] - mem) * beta;
      for (int64_t d = 0; d < dk; ++d) S[d * dv + e] += kh[d] * delta;
    }
    for (int64_t e = 0; e < dv; ++e) {
      double acc = 0;
      for (int64_t d = 0; d < dk; ++d) acc += S[d * dv + e] * qh[d];
      oh[e] = static_cast<float>(acc);
    }
  }
  kernels_->gated_rmsnorm_forward(y_.data(), rstd_.data(), o_.data(), z_.data(), w.la_norm, Hv, dv, eps_);
  kernels_->linear_forward(out, y_.data(), w.la_out_proj, wb.la_out_proj, nullptr, 1, s_.value_dim(), C_, p);
}

}  // namespace lt
