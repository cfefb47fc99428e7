// Optimizer-state paging: which decoder layers keep their optimizer states (8-bit m and v
// with their block scales) on NVMe instead of host memory, and in which stages
// (plan_stages.h) those states move: each paged state is read from NVMe in a stage
// strictly before the layer's update and written back in a stage strictly after it, so
// neither transfer waits on the update inside its own window.
//
// Two ways to decide it:
//  - the rule (plan_state_paging), which the heuristic policies use: only plans with the
//    lazy optimizer page; layer j's update runs in F{j-2}, its state is read in the window
//    before (P1 or F{j-3}) and written back in F{j-1}, so both transfers run under
//    forward compute. Layers 0 and 1 stay on the host, as do the embedding and the head;
//    the top layers page first (they leave the most forward windows to hide the reads in).
//  - the MILP (milp_planner.h), which chooses the layers and both stages itself and hands
//    them to paging_from_stages.
//
// The states in flight live in a fixed host reservation of staging slots (as many layer
// states as the read-to-write intervals overlap), counted in the plan's host state; the
// os.<j> transfers move bytes between NVMe and that reservation, so they are not
// activation staging.
#pragma once

#include <vector>

#include "plan/cost_model.h"
#include "plan/plan_request.h"
#include "plan/plan_stages.h"

namespace lt {

struct StatePaging {
  std::vector<bool> on_nvme;    // per layer
  std::vector<int> read_stage;  // per layer: the stage whose window reads its state (-1: not paged)
  std::vector<int> write_stage; // per layer: the stage whose window writes it back (-1: not paged)
  int count = 0;
  // Per paged layer, which of the parts the request lets page do (page_parts below; all
  // of them unless it says otherwise).
  std::vector<bool> master_on_nvme, grads_on_nvme;
  std::vector<double> state_bytes;  // per layer: what its read moves (LayerCost::paged_bytes of its parts)
  std::vector<double> write_bytes;  // per layer: what its write-back moves (paged_write_bytes of its parts)
  std::vector<double> grad_bytes;   // per layer: its gradients' write after their drain (gs.<j>; 0: none)
  double layer_bytes = 0;       // a staging slot: the largest layer's optimizer state
  int staging_slots = 0;        // host buffers the states in flight need at once
  double grad_staging_bytes = 0;  // paged gradients on the host between their backward and their write
  // Paged bf16 copies (PlanRequest::page_copy; page_copies below): per layer, and what
  // each moves; the host staging they use (kCopyStagingLayers of the largest).
  std::vector<bool> copy_on_nvme;
  std::vector<double> copy_bytes;
  double copy_layer_bytes = 0;
  double copy_staging_bytes = 0;
  double host_state_bytes = 0;  // the policy's host state, less the paged states, plus the slots
  double nvme_bytes() const {
    double b = 0;
    for (size_t j = 0; j < on_nvme.size(); ++j) {
      if (on_nvme[j]) b += state_bytes[j];
      if (j < copy_on_nvme.size() && copy_on_nvme[j]) b += copy_bytes[j];
    }
    return b;
  }

  // The rule's stages for a paged layer j >= 2.
  static int rule_update_stage(const Stages& st, int j) { return st.forward(j - 2); }
  static int rule_read_stage(const Stages& st, int j) { return j == 2 ? st.p1() : st.forward(j - 3); }
  static int rule_write_stage(const Stages& st, int j) { return st.forward(j - 1); }
  // Paged gradients of layer j >= 1 are written in the stage after their drain, the rule's
  // (backward slot j-1): the gradients of three layers are on the host at once at most
  // (the one in backward, the one draining, the one being written).
  static int grad_write_stage(const Stages& st, int j) { return j >= 2 ? st.backward(j - 2) : st.epilogue(); }
  static constexpr int kGradStagingLayers = 3;
  // A paged bf16 copy of layer j (2 <= j <= L-3) lives in host staging from its update
  // (no earlier than F{j-2}) through F{j}, whose window writes it to NVMe, and again from
  // backward slot j+2, whose window reads it back, through B{j}: three layers' copies at
  // once in either phase, the phases apart.
  static int copy_write_stage(const Stages& st, int j) { return st.forward(j); }
  static int copy_read_stage(const Stages& st, int j) { return st.backward(j + 2); }
  static bool copy_may_page(int L, int j) { return j >= 2 && j <= L - 3; }
  static constexpr int kCopyStagingLayers = 3;
};

// Keeps on the host the masters and the gradients of the paged layers that `masters` and
// `grads` do not name (each naming paged layers only; gradients of layers whose masters
// page, where masters may page): their bytes stay in the host state and leave the layer's
// NVMe traffic. The slots stay as large as every part needs.
void page_parts(StatePaging& p, const CostModel& cm, const std::vector<bool>& masters, const std::vector<bool>& grads);

// Pages the bf16 copies of the layers `copy` names (each paged, copy_may_page; cm's
// copy_page_bytes): their bytes leave the host state for NVMe, and the copy staging joins
// it once any pages.
void page_copies(StatePaging& p, const CostModel& cm, const std::vector<bool>& copy);

// The paging a request gets by the rule. req.nvme_state_layers >= 0 asks for that many
// layers (lt::Error when more than L-2); < 0 pages as few as make the host state and its
// staging fit 90% of host memory (PlanRequest::cpu_budget's share), at most L-2. No paging
// when the optimizer is not lazy.
StatePaging plan_state_paging(const PlanRequest& req, const CostModel& cm, bool lazy_optimizer);

// Paging with chosen layers and stages (read[j] < write[j] for a paged layer, -1 for one
// that stays on the host): the slot count is the most read-to-write intervals (inclusive)
// that overlap in one stage.
StatePaging paging_from_stages(const CostModel& cm, const std::vector<int>& read, const std::vector<int>& write);

// The host share PlanRequest::cpu_budget leaves to the persistent state and activations:
// paging must bring the host state within it.
constexpr double kHostStateShare = 0.9;

}  // namespace lt
