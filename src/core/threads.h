// Thread count for lazytrain's kernels and oneDNN (both run on the OpenMP runtime).
// Set once at start-up from --threads or LT_THREADS; default: all cores.
#pragma once

namespace lt {

// n <= 0 means "all cores". Returns the count now in force.
int set_num_threads(int n);
int num_threads();

}  // namespace lt
