// What this CPU can run, read from cpuid once, and which instruction-set level the kernels
// may use. Every ISA question in lazytrain is answered here: kernels never probe the CPU
// and never test compiler macros (__AVX512F__); they ask active_isa() through
// core/isa_dispatch.h.
//
// Levels, each a superset of the one before:
//   scalar  the portable baseline the whole binary is built for (x86-64-v2)
//   avx2    AVX2 + FMA + F16C (x86-64-v3)
//   avx512  AVX-512 F/BW/DQ/VL; kernels may use VBMI and AVX512-BF16 inside it when
//           cpu_features() has them
// The environment variable LT_CPU=scalar|avx2|avx512|native (default native) caps the
// level: for tests, for users, for bug reports. It is read once, at first use; a cap above
// what the CPU has is the CPU's level. oneDNN, which dispatches on its own, gets the same
// cap (kernels/cpu/matmul.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lt {

struct CpuFeatures {
  std::string brand;  // "AMD EPYC 9R14 96-Core Processor", from cpuid's brand string
  bool avx2 = false, fma = false, f16c = false, bmi2 = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512vbmi = false, avx512bf16 = false;
  bool amx_bf16 = false;  // AMX tiles with bf16 (oneDNN's fastest bf16 matmul)
  // Each ISA flag above is also false when the OS does not save that register state (XCR0).
};

// Read once (thread-safe), then cached.
const CpuFeatures& cpu_features();

enum class Isa : int { Scalar = 0, Avx2 = 1, Avx512 = 2 };
inline constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512};

std::string_view isa_name(Isa isa);  // "scalar", "avx2", "avx512"
// The best level this CPU supports, ignoring LT_CPU.
Isa machine_isa();
// LT_CPU's cap (native = machine_isa()). Throws lt::Error naming the bad value.
Isa isa_cap();
// What kernels run now: min(machine_isa(), isa_cap(), a test's ScopedIsaCap).
Isa active_isa();
// Why a level cannot run here ("this CPU lacks avx512bw avx512vl"); empty when it can.
std::string isa_missing(Isa isa);
// The levels that can run here under LT_CPU, lowest first (tests loop over these).
std::vector<Isa> runnable_isas();

// One line for startup banners and bug reports:
//   "cpu AMD EPYC ... [avx2 fma f16c avx512f avx512bw avx512dq avx512vl avx512vbmi avx512bf16]
//    kernels avx512 (LT_CPU=native)"
std::string cpu_summary();

// Lowers active_isa() to at most `cap` for the scope (tests compare every variant this
// way). Not for concurrent use with kernels on other threads; nests.
class ScopedIsaCap {
 public:
  explicit ScopedIsaCap(Isa cap);
  ~ScopedIsaCap();
  ScopedIsaCap(const ScopedIsaCap&) = delete;
  ScopedIsaCap& operator=(const ScopedIsaCap&) = delete;

 private:
  int previous_;
};

}  // namespace lt
