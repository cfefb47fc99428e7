#include "plan/plan_json.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/layer_specs.h"
#include "plan/data_parallel.h"

namespace lt {

const char* window_kind_name(WindowKind k) {
  switch (k) {
    case WindowKind::Prologue0: return "P0";
    case WindowKind::Prologue1: return "P1";
    case WindowKind::Forward: return "forward";
    case WindowKind::Head: return "head";
    case WindowKind::Recompute: return "recompute";
    case WindowKind::Backward: return "backward";
    case WindowKind::Load: return "load";
    case WindowKind::Epilogue: return "E";
  }
  return "?";
}

const char* link_name(Link l) {
  switch (l) {
    case Link::H2D: return "h2d";
    case Link::D2H: return "d2h";
    case Link::NvmeWrite: return "nvme_write";
    case Link::NvmeRead: return "nvme_read";
    case Link::Net: return "net";
  }
  return "?";
}

namespace {

WindowKind parse_kind(const std::string& s, const std::string& where) {
  for (WindowKind k : {WindowKind::Prologue0, WindowKind::Prologue1, WindowKind::Forward, WindowKind::Head,
                       WindowKind::Recompute, WindowKind::Backward, WindowKind::Load, WindowKind::Epilogue})
    if (s == window_kind_name(k)) return k;
  throw Error(std::string("unknown window kind '").append(s).append("'"), where, "regenerate the plan with `lazytrain plan`");
}

Link parse_link(const std::string& s, const std::string& where) {
  for (Link l : {Link::H2D, Link::D2H, Link::NvmeWrite, Link::NvmeRead, Link::Net})
    if (s == link_name(l)) return l;
  throw Error(std::string("unknown link '").append(s).append("'"), where, "regenerate the plan with `lazytrain plan`");
}

const char* tier_name(const BoundaryPlacement& b) {
  if (b.recompute) return "recompute";
  if (b.gpu >= 1 - 1e-9) return "gpu";
  if (b.cpu >= 1 - 1e-9) return "cpu";
  if (b.nvme >= 1 - 1e-9) return "nvme";
  return "split";
}

nlohmann::json peaks_json(const PeakBytes& p) { return {{"gpu", p.gpu}, {"cpu", p.cpu}, {"nvme", p.nvme}}; }

constexpr const char* kRegenerate = "regenerate the plan with `lazytrain plan`";

std::string short_dump(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// An integer field of type T, checked for type and range: json::get<int>() of a float or of
// an integer out of range is undefined behaviour or a silent wrap, not an error.
template <typename T>
T int_field(const nlohmann::json& v, const std::string& field, const std::string& where) {
  if (!v.is_number_integer())
    throw Error(field + " must be an integer, got " + short_dump(v), where, kRegenerate);
  const bool fits = v.is_number_unsigned()
                        ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                        : v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                              v.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max());
  if (!fits) throw Error(field + " " + short_dump(v) + " is out of range", where, kRegenerate);
  return v.is_number_unsigned() ? static_cast<T>(v.get<uint64_t>()) : static_cast<T>(v.get<int64_t>());
}

std::vector<int> int_list(const nlohmann::json& v, const std::string& field, const std::string& where) {
  if (!v.is_array()) throw Error(field + " must be a list of integers, got " + short_dump(v), where, kRegenerate);
  std::vector<int> out;
  for (const auto& x : v) out.push_back(int_field<int>(x, field, where));
  return out;
}

// The decimal index at s[pos..] (digits only, the whole rest of s), or -1.
int64_t index_at(const std::string& s, size_t pos) {
  if (pos >= s.size() || s.size() - pos > 9) return -1;
  int64_t v = 0;
  for (size_t i = pos; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// An update target: embed, head, layer.<j> (j below L), and with allow_all "all".
bool valid_target(const std::string& t, int L, bool allow_all) {
  if (t == "embed" || t == "head" || (allow_all && t == "all")) return true;
  if (!starts_with(t, "layer.")) return false;
  const int64_t j = index_at(t, 6);
  return j >= 0 && j < L;
}

// The tensor names of plan.h: w.<j>, wres.<j>, wx.<j>, g.<j>, gx.<j>, int.<j>, os.<j> (layers 0..L-1),
// w.head, g.head, in.0, dx.0, rc.<b>, a.<b>.{gpu,cpu,nvme,tmp} (boundaries 0..L), and for a
// head streamed in `head_chunks` chunks (0: whole) w.head.<c>, g.head.<c> (c below it),
// w.head.norm, g.head.norm, and the data-parallel collectives sum.<t>, bcast.<t>
// (plan/data_parallel.h). The executor and the simulator index arrays by these numbers,
// so a plan file must not hold any other.
bool valid_tensor_name(const std::string& t, int L, int64_t head_chunks) {
  if (t == "w.head" || t == "g.head" || t == "in.0" || t == "dx.0") return true;
  if (const std::string target = exchange_target(t); !target.empty()) return valid_target(target, L, false);
  for (const char* head_prefix : {"w.head.", "g.head."})
    if (starts_with(t, head_prefix)) {
      if (head_chunks == 0) return false;
      if (t.substr(std::strlen(head_prefix)) == "norm") return true;
      const int64_t c = index_at(t, std::strlen(head_prefix));
      return c >= 0 && c < head_chunks;
    }
  for (const char* layer_prefix : {"w.", "wres.", "wx.", "g.", "gx.", "int.", "os.", "gs.", "cp."})
    if (starts_with(t, layer_prefix)) {
      const int64_t j = index_at(t, std::strlen(layer_prefix));
      return j >= 0 && j < L;
    }
  if (starts_with(t, "rc.")) {
    const int64_t b = index_at(t, 3);
    return b >= 0 && b <= L;
  }
  if (starts_with(t, "a.")) {
    const size_t dot = t.find('.', 2);
    if (dot == std::string::npos) return false;
    const std::string part = t.substr(dot + 1);
    if (part != "gpu" && part != "cpu" && part != "nvme" && part != "tmp") return false;
    const int64_t b = index_at(t.substr(0, dot), 2);
    return b >= 0 && b <= L;
  }
  return false;
}

// The compute-tier requests of plan.h's alloc and free (plan/stream_schedule.h's names):
// x.<b>, r.<b>, r.<b>.<k> (boundaries 0..L; k from 1), wr.<j>, wb.<j> (layers),
// head.norm_out, head.rstd, head.d_hidden, w.norm, g.norm, w.lm_head and g.lm_head (whole)
// or w.lm_head.<k> and g.lm_head.<k> (k = 0, 1: a streamed head's two slots), dx.0, dx.1
// and ws.<window name>; besides the names valid_tensor_name takes (megatrain-code's, and
// those of plans written before version 3).
bool valid_memory_name(const std::string& t, int L, int64_t head_chunks, const std::vector<std::string>& windows) {
  if (valid_tensor_name(t, L, head_chunks)) return true;
  for (const char* fixed : {"head.norm_out", "head.rstd", "head.d_hidden", "w.norm", "g.norm", "dx.1"})
    if (t == fixed) return true;
  for (const char* lm : {"w.lm_head", "g.lm_head"}) {
    if (t == lm) return head_chunks == 0;
    if (starts_with(t, lm) && t.size() == std::strlen(lm) + 2 && t[std::strlen(lm)] == '.')
      return head_chunks > 0 && (t.back() == '0' || t.back() == '1');
  }
  for (const char* boundary_prefix : {"x.", "r."})
    if (starts_with(t, boundary_prefix)) {
      const size_t dot = t.find('.', 2);  // r.<b>.<k>: a later fetch's rows
      if (dot != std::string::npos && (boundary_prefix[0] != 'r' || index_at(t, dot + 1) < 1)) return false;
      const int64_t b = index_at(t.substr(0, dot), 2);
      return b >= 0 && b <= L;
    }
  for (const char* layer_prefix : {"wr.", "wb."})
    if (starts_with(t, layer_prefix)) {
      const int64_t j = index_at(t, 3);
      return j >= 0 && j < L;
    }
  if (starts_with(t, "ws.")) return std::find(windows.begin(), windows.end(), t.substr(3)) != windows.end();
  return false;
}

// "layer.<j>" with j in 0..L-1, "embed", "head" (and "all" where allowed).

// What every consumer of a plan indexes by: layers, boundaries, windows and tensor names
// in range. (Validation of the plan's semantics is plan_validate.h's.)
void check_structure(const Plan& p, const std::string& where) {
  const int L = p.num_layers;
  auto bad = [&](const std::string& what) { throw Error(what, where, kRegenerate); };
  if (L < 1 || L > (1 << 20)) bad("num_layers " + std::to_string(L) + " is out of range");
  if (p.model.num_layers != L)
    bad("num_layers " + std::to_string(L) + " differs from the model config's " + std::to_string(p.model.num_layers));
  if (p.batch < 1 || p.seq < 1) bad("batch and seq must be positive");
  if (p.head_chunk_rows < 0 || p.head_chunk_rows >= p.model.vocab_size)
    bad("head chunk of " + std::to_string(p.head_chunk_rows) + " rows: must be 0 (whole) or below the vocabulary (" +
        std::to_string(p.model.vocab_size) + ")");
  const int64_t head_chunks = p.head_streamed() ? p.head_chunks() : 0;
  if (static_cast<int>(p.boundaries.size()) != L + 1)
    bad("plan has " + std::to_string(p.boundaries.size()) + " boundaries for " + std::to_string(L) + " layers");
  for (const auto& [s, e] : p.blocks)
    if (s < 0 || e > L || s >= e)
      bad("recompute block [" + std::to_string(s) + ", " + std::to_string(e) + "] is not within 0.." +
          std::to_string(L));
  for (const auto* list : {&p.resident_layers, &p.keep_internals, &p.nvme_state_layers, &p.nvme_master_layers,
                           &p.nvme_grad_layers, &p.nvme_copy_layers})
    for (int j : *list)
      if (j < 0 || j >= L) bad("layer " + std::to_string(j) + " is not one of the plan's 0.." + std::to_string(L - 1));
  const int n = static_cast<int>(p.windows.size());
  for (const OptimizerPlacement& o : p.optimizer) {
    if (o.window < -1 || o.window >= n)
      bad("optimizer placement of " + o.target + " names window " + std::to_string(o.window) + " of " +
          std::to_string(n));
    if (!valid_target(o.target, L, false)) bad("optimizer placement target '" + o.target + "' is not a layer, embed or head");
  }
  std::vector<std::string> window_names;
  for (const Window& w : p.windows) window_names.push_back(w.name);
  for (const Window& w : p.windows) {
    const std::string in = " in window " + w.name;
    if (w.layer < -1 || w.layer >= L) bad("layer " + std::to_string(w.layer) + in + " is out of range");
    // A layer pass reads its layer's weights and boundary (the simulator and the executor
    // index by it); every other window is the step's, not a layer's (the planners write -1).
    const bool layer_pass =
        w.kind == WindowKind::Forward || w.kind == WindowKind::Recompute || w.kind == WindowKind::Backward;
    if (layer_pass && w.layer < 0)
      bad(std::string(window_kind_name(w.kind)) + " window " + w.name + " names no layer (0.." +
          std::to_string(L - 1) + ")");
    if (!layer_pass && w.layer >= 0)
      bad(std::string(window_kind_name(w.kind)) + " window " + w.name + " names layer " + std::to_string(w.layer) +
          "; only forward, recompute and backward windows are a layer's (-1)");
    for (const Transfer& t : w.transfers) {
      if (!valid_tensor_name(t.tensor, L, head_chunks)) bad("unknown tensor '" + t.tensor + "'" + in);
      if ((t.link == Link::Net) != !exchange_target(t.tensor).empty())
        bad("tensor '" + t.tensor + "'" + in + (t.link == Link::Net ? " is no collective, but moves over the net"
                                                                   : " is a collective, but moves over " +
                                                                         std::string(link_name(t.link))));
      if (t.link == Link::Net && p.ranks < 2) bad("collective '" + t.tensor + "'" + in + " in a plan for one rank");
    }
    for (const auto* ops : {&w.alloc, &w.free})
      for (const MemOp& m : *ops)
        if (!valid_memory_name(m.tensor, L, head_chunks, window_names)) bad("unknown tensor '" + m.tensor + "'" + in);
    for (const HostTask& h : w.host)
      if ((h.task != "optimizer" && h.task != "clip") ||
          !(valid_target(h.target, L, true) || (h.task == "optimizer" && h.target == "rank part" && p.shard_optimizer)))
        bad("unknown host task '" + h.task + "' on '" + h.target + "'" + in);
  }
}

}  // namespace

Plan::TierCounts Plan::tier_counts() const {
  TierCounts t;
  for (const auto& b : boundaries) {
    if (b.recompute) {
      t.recompute += 1;
      continue;
    }
    t.gpu += b.gpu;
    t.cpu += b.cpu;
    t.nvme += b.nvme;
  }
  return t;
}

nlohmann::json plan_to_json(const Plan& p) {
  using nlohmann::json;
  json j;
  j["format"] = "lazytrain-plan";
  j["version"] = 3;
  j["policy"] = p.policy;
  j["feasible"] = p.feasible;
  j["infeasible_reason"] = p.infeasible_reason;
  j["model"] = {{"name", p.model_name},
                {"num_layers", p.num_layers},
                {"hidden_size", p.model.hidden_size},
                {"num_params", p.num_params},
                {"config", model_config_to_json(p.model)}};
  j["hardware"] = hardware_profile_to_json(p.hardware);
  j["batch"] = p.batch;
  j["seq"] = p.seq;
  j["budgets"] = {{"gpu_cap_bytes", p.gpu_cap_bytes},
                  {"cpu_act_bytes", p.cpu_act_budget_bytes},
                  {"nvme_act_bytes", p.nvme_act_budget_bytes}};
  j["fixed"] = {{"gpu_bytes", p.fixed_gpu_bytes}, {"host_state_bytes", p.host_state_bytes}};
  if (p.scratch.layer_bytes >= 0) j["fixed"]["layer_scratch_bytes"] = p.scratch.layer_bytes;
  if (p.scratch.head_bytes >= 0) j["fixed"]["head_scratch_bytes"] = p.scratch.head_bytes;
  j["head"] = {{"chunk_rows", p.head_chunk_rows}, {"chunks", p.head_chunks()}};
  if (p.ranks > 1)
    j["data_parallel"] = {{"ranks", p.ranks}, {"sharded", p.shard_optimizer}, {"slot_sums", p.slot_sums}};
  json bs = json::array();
  for (size_t i = 0; i < p.boundaries.size(); ++i) {
    const auto& b = p.boundaries[i];
    bs.push_back({{"index", i}, {"tier", tier_name(b)}, {"gpu", b.gpu}, {"cpu", b.cpu}, {"nvme", b.nvme}});
  }
  j["boundaries"] = bs;
  json blocks = json::array();
  for (auto [s, e] : p.blocks) blocks.push_back({s, e});
  j["recompute_blocks"] = blocks;
  j["resident_layers"] = p.resident_layers;
  j["keep_internals"] = p.keep_internals;
  json place = json::array();
  for (const auto& o : p.optimizer) place.push_back({{"target", o.target}, {"window", o.window}, {"fraction", o.fraction}});
  j["optimizer"] = {{"lazy", p.lazy_optimizer},
                    {"placement", place},
                    {"nvme_state_layers", p.nvme_state_layers},
                    {"state_bytes_per_layer", p.state_bytes_per_layer}};
  if (!p.nvme_master_layers.empty()) j["optimizer"]["nvme_master_layers"] = p.nvme_master_layers;
  if (!p.nvme_grad_layers.empty()) j["optimizer"]["nvme_grad_layers"] = p.nvme_grad_layers;
  if (!p.nvme_copy_layers.empty()) {
    j["optimizer"]["nvme_copy_layers"] = p.nvme_copy_layers;
    j["optimizer"]["copy_bytes_per_layer"] = p.copy_bytes_per_layer;
  }
  json ws = json::array();
  for (const auto& w : p.windows) {
    json wj = {{"name", w.name},
               {"kind", window_kind_name(w.kind)},
               {"layer", w.layer},
               {"stage", w.stage},
               {"compute_flops", w.compute_flops},
               {"compute_s", w.compute_s},
               {"workspace_bytes", w.workspace_bytes}};
    json tr = json::array(), host = json::array(), al = json::array(), fr = json::array();
    for (const auto& t : w.transfers) tr.push_back({{"tensor", t.tensor}, {"link", link_name(t.link)}, {"bytes", t.bytes}});
    for (const auto& h : w.host)
      host.push_back({{"task", h.task}, {"target", h.target}, {"work", h.work}, {"seconds", h.seconds}});
    for (const auto& a : w.alloc) al.push_back({{"tensor", a.tensor}, {"bytes", a.bytes}});
    for (const auto& f : w.free) fr.push_back({{"tensor", f.tensor}, {"bytes", f.bytes}});
    wj["transfers"] = tr;
    wj["host"] = host;
    wj["alloc"] = al;
    wj["free"] = fr;
    ws.push_back(wj);
  }
  j["windows"] = ws;
  j["predicted"] = {{"step_s", p.predicted_step_s},
                    {"tokens_per_s", p.tokens_per_s()},
                    {"tflops", p.tflops()},
                    {"peak_bytes", peaks_json(p.predicted_peak)}};
  j["solver"] = {{"solve_s", p.solve.solve_s}, {"solve_cpu_s", p.solve.solve_cpu_s}, {"mip_gap", p.solve.mip_gap}, {"objective_s", p.solve.objective_s},
                 {"bound_s", p.solve.bound_s}, {"status", p.solve.status}, {"columns", p.solve.columns},
                 {"rows", p.solve.rows}};
  return j;
}

Plan plan_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("format") || j["format"] != "lazytrain-plan")
    throw Error("not a lazytrain plan (format field)", where, "give a file written by `lazytrain plan --out`");
  // Version 1 predates the streamed head: its plans hold the head whole. Version 2 names
  // its memory ops as the planner did before they were the executor's requests (read as
  // they are).
  if (!j.contains("version") || (j["version"] != 1 && j["version"] != 2 && j["version"] != 3))
    throw Error("unsupported plan version " + (j.contains("version") ? short_dump(j["version"]) : std::string("(none)")),
                where, "regenerate the plan with this lazytrain");
  const bool v1 = j["version"] == 1;
  Plan p;
  try {
    p.policy = j.at("policy").get<std::string>();
    p.feasible = j.at("feasible").get<bool>();
    p.infeasible_reason = j.value("infeasible_reason", std::string());
    const auto& mj = j.at("model");
    p.model_name = mj.at("name").get<std::string>();
    p.num_layers = int_field<int>(mj.at("num_layers"), "model.num_layers", where);
    p.num_params = mj.at("num_params").get<double>();
    p.model = parse_model_config(mj.at("config"), where + ": model.config");
    p.num_active_params = static_cast<double>(active_params(p.model));
    p.hardware = parse_hardware_profile(j.at("hardware"), where + ": hardware");
    p.batch = int_field<int64_t>(j.at("batch"), "batch", where);
    p.seq = int_field<int64_t>(j.at("seq"), "seq", where);
    const auto& b = j.at("budgets");
    p.gpu_cap_bytes = b.at("gpu_cap_bytes").get<double>();
    p.cpu_act_budget_bytes = b.at("cpu_act_bytes").get<double>();
    p.nvme_act_budget_bytes = b.at("nvme_act_bytes").get<double>();
    p.fixed_gpu_bytes = j.at("fixed").at("gpu_bytes").get<double>();
    p.host_state_bytes = j.at("fixed").at("host_state_bytes").get<double>();
    p.scratch.layer_bytes = j.at("fixed").value("layer_scratch_bytes", -1.0);
    p.scratch.head_bytes = j.at("fixed").value("head_scratch_bytes", -1.0);
    if (j.contains("data_parallel")) {
      const auto& dp = j.at("data_parallel");
      p.ranks = int_field<int>(dp.at("ranks"), "data_parallel.ranks", where);
      if (p.ranks < 1) throw Error("data_parallel.ranks must be at least 1", where, kRegenerate);
      p.shard_optimizer = dp.at("sharded").get<bool>();
      p.slot_sums = dp.value("slot_sums", false);  // absent in plans written before the rule
    }
    if (!v1) {
      p.head_chunk_rows = int_field<int64_t>(j.at("head").at("chunk_rows"), "head.chunk_rows", where);
      // Written for readers; it must agree with the rows (or the file was edited).
      const int64_t chunks = int_field<int64_t>(j.at("head").at("chunks"), "head.chunks", where);
      if (p.head_chunk_rows > 0 && p.head_chunk_rows < p.model.vocab_size &&  // else check_structure says why
          chunks != (p.model.vocab_size + p.head_chunk_rows - 1) / p.head_chunk_rows)
        throw Error("head.chunks " + std::to_string(chunks) + " does not match " + std::to_string(p.head_chunk_rows) +
                        " rows per chunk of a vocabulary of " + std::to_string(p.model.vocab_size),
                    where, kRegenerate);
    }
    for (const auto& bj : j.at("boundaries"))
      p.boundaries.push_back({bj.at("tier").get<std::string>() == "recompute", bj.at("gpu").get<double>(),
                              bj.at("cpu").get<double>(), bj.at("nvme").get<double>()});
    for (const auto& bl : j.at("recompute_blocks"))
      p.blocks.emplace_back(int_field<int>(bl.at(0), "recompute_blocks", where),
                            int_field<int>(bl.at(1), "recompute_blocks", where));
    p.resident_layers = int_list(j.at("resident_layers"), "resident_layers", where);
    p.keep_internals = int_list(j.at("keep_internals"), "keep_internals", where);
    p.lazy_optimizer = j.at("optimizer").at("lazy").get<bool>();
    for (const auto& o : j.at("optimizer").at("placement"))
      p.optimizer.push_back({o.at("target").get<std::string>(), int_field<int>(o.at("window"), "optimizer.placement.window", where),
                             o.at("fraction").get<double>()});
    // Optional: plans written before optimizer-state paging have none.
    if (j.at("optimizer").contains("nvme_state_layers"))
      p.nvme_state_layers = int_list(j.at("optimizer").at("nvme_state_layers"), "optimizer.nvme_state_layers", where);
    p.state_bytes_per_layer = j.at("optimizer").value("state_bytes_per_layer", 0.0);
    // Per-layer parts; plans written before them page all of a paged layer's or none.
    const nlohmann::json& opt = j.at("optimizer");
    for (auto [key, old_key, list] : {std::tuple{"nvme_master_layers", "paged_master", &p.nvme_master_layers},
                                      std::tuple{"nvme_grad_layers", "paged_grads", &p.nvme_grad_layers}})
      if (opt.contains(key))
        *list = int_list(opt.at(key), std::string("optimizer.") + key, where);
      else if (opt.value(old_key, false))
        *list = p.nvme_state_layers;
    if (j.at("optimizer").contains("nvme_copy_layers"))
      p.nvme_copy_layers = int_list(j.at("optimizer").at("nvme_copy_layers"), "optimizer.nvme_copy_layers", where);
    p.copy_bytes_per_layer = j.at("optimizer").value("copy_bytes_per_layer", 0.0);
    for (const auto& wj : j.at("windows")) {
      Window w;
      w.name = wj.at("name").get<std::string>();
      w.kind = parse_kind(wj.at("kind").get<std::string>(), where);
      w.layer = int_field<int>(wj.at("layer"), "windows.layer", where);
      w.stage = int_field<int>(wj.at("stage"), "windows.stage", where);
      w.compute_flops = wj.at("compute_flops").get<double>();
      w.compute_s = wj.at("compute_s").get<double>();
      w.workspace_bytes = wj.at("workspace_bytes").get<double>();
      for (const auto& t : wj.at("transfers"))
        w.transfers.push_back({t.at("tensor").get<std::string>(), parse_link(t.at("link").get<std::string>(), where),
                               t.at("bytes").get<double>()});
      for (const auto& h : wj.at("host"))
        w.host.push_back({h.at("task").get<std::string>(), h.at("target").get<std::string>(), h.at("work").get<double>(),
                          h.at("seconds").get<double>()});
      for (const auto& a : wj.at("alloc")) w.alloc.push_back({a.at("tensor").get<std::string>(), a.at("bytes").get<double>()});
      for (const auto& f : wj.at("free")) w.free.push_back({f.at("tensor").get<std::string>(), f.at("bytes").get<double>()});
      p.windows.push_back(std::move(w));
    }
    const auto& pr = j.at("predicted");
    p.predicted_step_s = pr.at("step_s").get<double>();
    const auto& pk = pr.at("peak_bytes");
    p.predicted_peak = {pk.at("gpu").get<double>(), pk.at("cpu").get<double>(), pk.at("nvme").get<double>()};
    const auto& s = j.at("solver");
    p.solve = {s.at("solve_s").get<double>(), s.value("solve_cpu_s", 0.0), s.at("mip_gap").get<double>(), s.at("objective_s").get<double>(),
               s.at("bound_s").get<double>(), s.at("status").get<std::string>(), int_field<int>(s.at("columns"), "solver.columns", where),
               int_field<int>(s.at("rows"), "solver.rows", where)};
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("malformed plan: ") + e.what(), where, "regenerate the plan with `lazytrain plan`");
  }
  check_structure(p, where);
  return p;
}

void save_plan(const Plan& p, const std::string& path) {
  std::ofstream f(path);
  if (!f) throw Error("cannot write plan", path, "check the directory exists and is writable");
  f << plan_to_json(p).dump(1) << "\n";
  if (!f) throw Error("error writing plan", path, "check free space");
}

Plan load_plan(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("cannot open plan", path, "check the path");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("invalid JSON: ") + e.what(), path, "regenerate the plan");
  }
  return plan_from_json(j, path);
}

nlohmann::json plan_summary_json(const Plan& p) {
  auto tc = p.tier_counts();
  return {{"feasible", p.feasible},
          {"policy", p.policy},
          {"batch", p.batch},
          {"seq", p.seq},
          {"predicted_step_s", p.predicted_step_s},
          {"tokens_per_s", p.tokens_per_s()},
          {"tflops", p.tflops()},
          {"head_chunk_rows", p.head_chunk_rows},
          {"solve_s", p.solve.solve_s},
          {"mip_gap", p.solve.mip_gap},
          {"boundaries", {{"gpu", tc.gpu}, {"cpu", tc.cpu}, {"nvme", tc.nvme}, {"recompute", tc.recompute}}},
          {"peak_bytes", peaks_json(p.predicted_peak)}};
}

}  // namespace lt
