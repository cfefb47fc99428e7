#include "core/threads.h"

#include <omp.h>

namespace lt {

int set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  return n;
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace lt
