#include "plan/plan_json.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

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
  for (Link l : {Link::H2D, Link::D2H, Link::NvmeWrite, Link::NvmeRead})
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
  j["version"] = 1;
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
  if (j.value("format", std::string()) != "lazytrain-plan")
    throw Error("not a lazytrain plan (format field)", where, "give a file written by `lazytrain plan --out`");
  if (j.value("version", 0) != 1)
    throw Error("unsupported plan version", where, "regenerate the plan with this lazytrain");
  Plan p;
  try {
    p.policy = j.at("policy").get<std::string>();
    p.feasible = j.at("feasible").get<bool>();
    p.infeasible_reason = j.value("infeasible_reason", std::string());
    const auto& mj = j.at("model");
    p.model_name = mj.at("name").get<std::string>();
    p.num_layers = mj.at("num_layers").get<int>();
    p.num_params = mj.at("num_params").get<double>();
    p.model = parse_model_config(mj.at("config"), where + ": model.config");
    p.hardware = parse_hardware_profile(j.at("hardware"), where + ": hardware");
    p.batch = j.at("batch").get<int64_t>();
    p.seq = j.at("seq").get<int64_t>();
    const auto& b = j.at("budgets");
    p.gpu_cap_bytes = b.at("gpu_cap_bytes").get<double>();
    p.cpu_act_budget_bytes = b.at("cpu_act_bytes").get<double>();
    p.nvme_act_budget_bytes = b.at("nvme_act_bytes").get<double>();
    p.fixed_gpu_bytes = j.at("fixed").at("gpu_bytes").get<double>();
    p.host_state_bytes = j.at("fixed").at("host_state_bytes").get<double>();
    for (const auto& bj : j.at("boundaries"))
      p.boundaries.push_back({bj.at("tier").get<std::string>() == "recompute", bj.at("gpu").get<double>(),
                              bj.at("cpu").get<double>(), bj.at("nvme").get<double>()});
    for (const auto& bl : j.at("recompute_blocks")) p.blocks.emplace_back(bl.at(0).get<int>(), bl.at(1).get<int>());
    p.resident_layers = j.at("resident_layers").get<std::vector<int>>();
    p.keep_internals = j.at("keep_internals").get<std::vector<int>>();
    p.lazy_optimizer = j.at("optimizer").at("lazy").get<bool>();
    for (const auto& o : j.at("optimizer").at("placement"))
      p.optimizer.push_back({o.at("target").get<std::string>(), o.at("window").get<int>(), o.at("fraction").get<double>()});
    // Optional: plans written before optimizer-state paging have none.
    p.nvme_state_layers = j.at("optimizer").value("nvme_state_layers", std::vector<int>{});
    p.state_bytes_per_layer = j.at("optimizer").value("state_bytes_per_layer", 0.0);
    for (const auto& wj : j.at("windows")) {
      Window w;
      w.name = wj.at("name").get<std::string>();
      w.kind = parse_kind(wj.at("kind").get<std::string>(), where);
      w.layer = wj.at("layer").get<int>();
      w.stage = wj.at("stage").get<int>();
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
               s.at("bound_s").get<double>(), s.at("status").get<std::string>(), s.at("columns").get<int>(),
               s.at("rows").get<int>()};
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("malformed plan: ") + e.what(), where, "regenerate the plan with `lazytrain plan`");
  }
  if (static_cast<int>(p.boundaries.size()) != p.num_layers + 1)
    throw Error(std::string("plan has ")
                    .append(std::to_string(p.boundaries.size()))
                    .append(" boundaries for ")
                    .append(std::to_string(p.num_layers))
                    .append(" layers"),
                where, "regenerate the plan");
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
          {"solve_s", p.solve.solve_s},
          {"mip_gap", p.solve.mip_gap},
          {"boundaries", {{"gpu", tc.gpu}, {"cpu", tc.cpu}, {"nvme", tc.nvme}, {"recompute", tc.recompute}}},
          {"peak_bytes", peaks_json(p.predicted_peak)}};
}

}  // namespace lt
