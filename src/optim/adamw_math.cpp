#include "optim/adamw_math.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace lt {

AdamWStepConsts make_step_consts(const AdamWHyper& h, float lr, float clip_factor, int64_t step) {
  if (step < 1)
    throw Error("optimizer step " + std::to_string(step) + " is not positive", "AdamW::step_tensor",
                "pass the 1-based step count of the update being made");
  if (!std::isfinite(lr) || lr < 0)
    throw Error("learning rate " + std::to_string(lr) + " is negative or not finite", "AdamW::step_tensor",
                "check the LR schedule");
  if (!(clip_factor >= 0 && clip_factor <= 1))
    throw Error("clip factor " + std::to_string(clip_factor) + " is outside [0, 1]", "AdamW::step_tensor",
                "compute it with clip_decision(); skip the step when it reports a non-finite norm");
  if (!(h.beta1 >= 0 && h.beta1 < 1 && h.beta2 >= 0 && h.beta2 < 1 && h.eps > 0))
    throw Error("AdamW betas must lie in [0, 1) and eps must be positive", "AdamWHyper",
                "fix the optimizer configuration");
  const double b1 = h.beta1, b2 = h.beta2;
  const double bc1 = 1.0 - std::pow(b1, double(step));
  const double bc2 = 1.0 - std::pow(b2, double(step));
  AdamWStepConsts c;
  c.beta1 = h.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - b1);
  c.beta2 = h.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - b2);
  c.eps = h.eps;
  c.decay = static_cast<float>(1.0 - double(lr) * h.weight_decay);
  c.step_size = static_cast<float>(lr / bc1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  c.clip = clip_factor;
  return c;
}

}  // namespace lt
