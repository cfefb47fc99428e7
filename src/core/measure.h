// Small measurement helpers shared by the benchmarks, `lazytrain profile`,
// `lazytrain bench` and the trainer's summary.
#pragma once

#include <cstdint>
#include <vector>

namespace lt {

// The median (upper median for an even count); NaN for an empty list. This machine class
// is noisy, so timings are reported as medians, never single runs or means.
double median(std::vector<double> v);

// Peak resident set size of this process, in bytes.
int64_t peak_rss_bytes();

}  // namespace lt
