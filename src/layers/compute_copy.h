// The bf16 compute copy of a parameter block: laid out exactly like ModelParameters, so
// the copy of any weight sits at the same offset as its fp32 master. Used with
// Precision::BF16 only; with F32 it holds nothing and hands out null pointers, which the
// linear kernels read as "use the fp32 weight".
#pragma once

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "kernels/cpu/matmul.h"
#include "model/parameters.h"

namespace lt {

class ComputeCopy {
 public:
  explicit ComputeCopy(Precision precision) : precision_(precision) {}

  // The whole copy, sized for params (an optimizer may write it in its update pass).
  bf16* data(const ModelParameters& params) {
    if (precision_ != Precision::BF16) return nullptr;
    if (copy_.size() != static_cast<size_t>(params.numel())) copy_.resize(params.numel());
    return copy_.data();
  }
  // Rounds every parameter to bf16. Call after the parameters change.
  void refresh(const ModelParameters& params) {
    if (bf16* out = data(params)) convert_f32_to_bf16(out, params.data(), params.numel());
  }
  // The bf16 copy of the weight at `f32` (a pointer into params), or null.
  const bf16* of(const ModelParameters& params, const float* f32) const {
    if (precision_ != Precision::BF16 || f32 == nullptr) return nullptr;
    LT_ASSERT(copy_.size() == static_cast<size_t>(params.numel()),
              "the bf16 compute copy was not refreshed before a bf16 pass");
    return copy_.data() + (f32 - params.data());
  }

 private:
  Precision precision_;
  AlignedBuffer<bf16> copy_;
};

}  // namespace lt
