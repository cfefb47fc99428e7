// Thread count for lazytrain's kernels and oneDNN (both run on the OpenMP runtime).
// Set once at start-up from --threads or LT_THREADS; default: all cores.
#pragma once

namespace lt {

// n <= 0 means "all cores". Returns the count now in force.
int set_num_threads(int n);
int num_threads();

// Runs a scope with another thread count, restoring the previous one on exit. For work
// too small to share: one decoding step of a small model spends longer in OpenMP
// barriers than in arithmetic, and far longer when the machine is busy.
class ScopedNumThreads {
 public:
  explicit ScopedNumThreads(int n) : previous_(num_threads()) { set_num_threads(n); }
  ~ScopedNumThreads() { set_num_threads(previous_); }
  ScopedNumThreads(const ScopedNumThreads&) = delete;
  ScopedNumThreads& operator=(const ScopedNumThreads&) = delete;

 private:
  int previous_;
};

}  // namespace lt
