#include "core/measure.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>

namespace lt {

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // ru_maxrss is in KiB on Linux
}

}  // namespace lt
