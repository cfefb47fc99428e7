// An SVG picture of a simulated step: one row per lane with its ops over time, the
// compute-tier bytes as a curve under them, and a boundary map (one cell per boundary,
// split by token fractions: gpu, cpu, nvme; hatched grey when recomputed).
#pragma once

#include <string>

#include "sim/simulator.h"

namespace lt {

std::string svg_timeline(const SimResult& r, const Plan& p);
void write_svg_timeline(const SimResult& r, const Plan& p, const std::string& path);

}  // namespace lt
