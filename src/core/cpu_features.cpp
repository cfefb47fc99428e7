#include "core/cpu_features.h"

#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace lt {
namespace {

struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(uint32_t leaf, uint32_t sub) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}

bool bit(uint32_t reg, int n) { return (reg >> n) & 1u; }

// XCR0: which register states the OS saves on a context switch. Without them the
// instructions fault even when cpuid lists them.
uint64_t xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

CpuFeatures read_features() {
  CpuFeatures f;
  const Regs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.c, 27);
  const uint64_t xcr = osxsave ? xcr0() : 0;
  const bool ymm_state = (xcr & 0x6) == 0x6;            // SSE + AVX state
  const bool zmm_state = ymm_state && (xcr & 0xe0) == 0xe0;  // opmask, ZMM hi256, hi16 ZMM
  const bool tile_state = (xcr & 0x60000) == 0x60000;   // XTILECFG + XTILEDATA
  const uint32_t max_leaf = cpuid(0, 0).a;
  const Regs l7 = max_leaf >= 7 ? cpuid(7, 0) : Regs{};
  const Regs l7s1 = max_leaf >= 7 && l7.a >= 1 ? cpuid(7, 1) : Regs{};

  f.fma = ymm_state && bit(l1.c, 12);
  f.f16c = ymm_state && bit(l1.c, 29);
  f.avx2 = ymm_state && bit(l1.c, 28) && bit(l7.b, 5);
  f.bmi2 = bit(l7.b, 8);
  f.avx512f = zmm_state && bit(l7.b, 16);
  f.avx512dq = f.avx512f && bit(l7.b, 17);
  f.avx512bw = f.avx512f && bit(l7.b, 30);
  f.avx512vl = f.avx512f && bit(l7.b, 31);
  f.avx512vbmi = f.avx512f && bit(l7.c, 1);
  f.avx512bf16 = f.avx512f && bit(l7s1.a, 5);
  f.amx_bf16 = tile_state && bit(l7.d, 22) && bit(l7.d, 24);

  const uint32_t max_ext = cpuid(0x80000000u, 0).a;
  if (max_ext >= 0x80000004u) {
    char brand[49] = {};
    for (uint32_t i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i, 0);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    f.brand = brand;
    const size_t first = f.brand.find_first_not_of(' ');
    const size_t last = f.brand.find_last_not_of(' ');
    f.brand = first == std::string::npos ? "" : f.brand.substr(first, last - first + 1);
  }
  return f;
}

Isa parse_cap() {
  const char* env = std::getenv("LT_CPU");
  const std::string v = env ? env : "";
  if (v.empty() || v == "native") return Isa::Avx512;
  for (Isa isa : kAllIsas)
    if (v == isa_name(isa)) return isa;
  throw Error("unknown LT_CPU value '" + v + "'", "the environment variable LT_CPU",
              "use scalar, avx2, avx512 or native (the default)");
}

// A test's cap (ScopedIsaCap); Avx512 means none.
std::atomic<int> g_scoped_cap{int(Isa::Avx512)};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = read_features();
  return f;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

std::string isa_missing(Isa isa) {
  const CpuFeatures& f = cpu_features();
  std::string missing;
  auto need = [&](bool has, const char* name) {
    if (!has) missing += std::string(missing.empty() ? "" : " ") + name;
  };
  if (isa >= Isa::Avx2) {
    need(f.avx2, "avx2");
    need(f.fma, "fma");
    need(f.f16c, "f16c");
  }
  if (isa >= Isa::Avx512) {
    need(f.avx512f, "avx512f");
    need(f.avx512bw, "avx512bw");
    need(f.avx512dq, "avx512dq");
    need(f.avx512vl, "avx512vl");
  }
  return missing.empty() ? "" : "this CPU lacks " + missing;
}

Isa machine_isa() {
  static const Isa best = isa_missing(Isa::Avx512).empty() ? Isa::Avx512
                          : isa_missing(Isa::Avx2).empty() ? Isa::Avx2
                                                           : Isa::Scalar;
  return best;
}

Isa isa_cap() {
  static const Isa cap = parse_cap();
  return cap;
}

Isa active_isa() {
  const int a = std::min({int(machine_isa()), int(isa_cap()),
                          g_scoped_cap.load(std::memory_order_relaxed)});
  return Isa(a);
}

std::vector<Isa> runnable_isas() {
  std::vector<Isa> out;
  const Isa top = Isa(std::min(int(machine_isa()), int(isa_cap())));
  for (Isa isa : kAllIsas)
    if (isa <= top) out.push_back(isa);
  return out;
}

std::string cpu_summary() {
  const CpuFeatures& f = cpu_features();
  std::string flags;
  auto add = [&](bool has, const char* name) {
    if (has) flags += std::string(flags.empty() ? "" : " ") + name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512dq, "avx512dq");
  add(f.avx512vl, "avx512vl");
  add(f.avx512vbmi, "avx512vbmi");
  add(f.avx512bf16, "avx512bf16");
  add(f.amx_bf16, "amx-bf16");
  const char* env = std::getenv("LT_CPU");
  return "cpu " + (f.brand.empty() ? std::string("x86-64") : f.brand) + " [" + flags + "] kernels " +
         std::string(isa_name(active_isa())) + " (LT_CPU=" + (env && *env ? env : "native") + ")";
}

ScopedIsaCap::ScopedIsaCap(Isa cap) : previous_(g_scoped_cap.load()) {
  g_scoped_cap.store(std::min(previous_, int(cap)));
}

ScopedIsaCap::~ScopedIsaCap() { g_scoped_cap.store(previous_); }

}  // namespace lt
