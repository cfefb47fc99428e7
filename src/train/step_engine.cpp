#include "train/step_engine.h"

#include <utility>

#include "core/error.h"
#include "dist/communicator.h"
#include "train/in_memory_training.h"
#include "train/streamed_training.h"

namespace lt {

std::unique_ptr<StepEngine> make_step_engine(const TrainConfig& cfg, const std::optional<Plan>& plan,
                                             std::optional<PlanRequest> request, ModelParameters& params,
                                             ModelParameters& grads, Updater& updater, Communicator* comm) {
  if (!plan) return std::make_unique<InMemoryTraining>(cfg, params, grads, updater, comm);
  StreamedTraining::Options options;
  options.request = std::move(request);
  options.comm = comm;
  return std::make_unique<StreamedTraining>(cfg, *plan, params, grads, updater, std::move(options));
}

}  // namespace lt
