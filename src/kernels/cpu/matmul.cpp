// Matmul through oneDNN's C++ API. Transposes are strides on the memory descriptors (no
// copies); bias is oneDNN's fused bias argument. `accumulate` (C += op(A) op(B)) computes
// the product first and then adds it to C, each finished sum rounded once onto C, as
// ref::matmul does. oneDNN's sum post-op, which it replaces, adds C in at a point of the
// K loop that depends on the kernel's K blocking, which differs by ISA: a gradient summed
// in place over two micro-batches then differed in the last bit from the same gradient
// summed in a zeroed slot and added to the host's (exec/gradient_sink.h; seen under
// LT_CPU=avx2 at 128 tokens per micro-batch). The product goes through scratch in blocks of
// rows (at most kAccumulateFloats floats), so an lm_head's gradient needs no second copy.
// Creating a primitive costs ~ms, and a training step repeats the same few shapes, so
// each MatmulContext caches its primitives by the full key of what was asked.
//
// bf16 on every CPU: oneDNN 2.6 has bf16 matmuls only from AVX-512 on, and they beat its
// fp32 GEMM only with AMX. Where it has none (or the kernels run below the avx512 level:
// LT_CPU, a test's ScopedIsaCap), or where the CPU has no AMX (Bf16GemmPath, matmul.h), a
// Precision::BF16 matmul widens its bf16 operands to fp32 and runs the fp32 GEMM. A
// bf16 x bf16 product is exact in fp32 (8 + 8 significant bits), so the widened path
// computes the same products and only the summation order differs.
#include "kernels/cpu/matmul.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/error.h"

namespace lt {
namespace {

// Below this many flops a matmul runs on one thread: a few microseconds of work, where an
// OpenMP fork/join costs as much on an idle machine, and a whole scheduler tick (ms) when
// the other core is busy (decoding steps, attention's small products, the tests).
constexpr double kSerialFlops = 1 << 21;
// An accumulating matmul's scratch: its product in blocks of rows of at most this many
// floats (16 MiB); and the adds onto C run on all threads from this many.
constexpr int64_t kAccumulateFloats = int64_t(1) << 22;
constexpr int64_t kParallelAddFloats = int64_t(1) << 15;

int threads_for(int64_t M, int64_t N, int64_t K) {
  return 2.0 * double(M) * double(N) * double(K) < kSerialFlops ? 1 : omp_get_max_threads();
}

// Whether a Precision::BF16 matmul of this layout takes the widened path now (defined
// below).
bool widen_bf16(bool trans_a, bool trans_b);

// oneDNN fixes a primitive's work split for the thread count at creation and runs that
// many threads whatever omp_set_num_threads says later, so the count is part of the key:
// set_num_threads then takes effect on the next call.
struct Key {
  int64_t M, N, K;
  bool trans_a, trans_b, bias;
  Precision p;
  // op(A)'s leading dimension where it is not the packed one (K; M when trans_a): a block
  // of rows of a larger A (accumulate's blocks). 0: packed.
  int64_t lda = 0;
  // BF16 asked for below the avx512 level or where the chosen path is Widened.
  bool widen = p == Precision::BF16 && widen_bf16(trans_a, trans_b);
  int threads = threads_for(M, N, K);
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = std::hash<int64_t>()(k.M);
    auto mix = [&h](uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    mix(uint64_t(k.N));
    mix(uint64_t(k.threads));
    mix(uint64_t(k.K));
    mix(uint64_t(k.lda));
    mix((k.trans_a ? 1u : 0u) | (k.trans_b ? 2u : 0u) |
        (k.bias ? 8u : 0u) | (k.p == Precision::BF16 ? 16u : 0u) | (k.widen ? 32u : 0u));
    return h;
  }
};

// Runs a scope (a primitive's creation and execution) under the key's thread count.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : outer_(omp_get_max_threads()), n_(n) {
    if (n_ != outer_) omp_set_num_threads(n_);
  }
  ~ThreadCount() {
    if (n_ != outer_) omp_set_num_threads(outer_);
  }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int outer_, n_;
};

struct Entry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  bool widened = false;  // a BF16 request served by an fp32 primitive on widened operands
};

// oneDNN dispatches on its own. Below the avx512 level it is capped as well, so that
// LT_CPU=avx2 on an AVX-512 machine runs what an AVX2 machine runs (oneDNN's own
// DNNL_MAX_CPU_ISA, if the user set it, wins: then the call fails, harmlessly).
// It must happen before the first primitive exists, hence once, at the first context.
void cap_onednn_isa() {
  static const bool once = [] {
    const Isa cap = std::min(isa_cap(), machine_isa());
    if (cap < Isa::Avx512)
      (void)dnnl::set_max_cpu_isa(cap == Isa::Avx2 ? dnnl::cpu_isa::avx2 : dnnl::cpu_isa::sse41);
    return true;
  }();
  (void)once;
}

// set_bf16_gemm_path's override, if any.
std::atomic<int> g_bf16_path_override{-1};  // -1: none, else a Bf16GemmPath

// LT_BF16_GEMM, when set; a value other than native or widened is an error at any level.
std::optional<Bf16GemmPath> env_path() {
  const char* env = std::getenv("LT_BF16_GEMM");
  if (!env || !*env) return std::nullopt;
  const std::string v = env;
  if (v == "native") return Bf16GemmPath::Native;
  if (v == "widened") return Bf16GemmPath::Widened;
  throw Error("LT_BF16_GEMM is '" + v + "'", "the environment", "set it to native or widened, or unset it");
}

Bf16GemmChoice rule_choice() {
  if (const std::optional<Bf16GemmPath> p = env_path())
    return {*p, *p == Bf16GemmPath::Native ? "LT_BF16_GEMM=native" : "LT_BF16_GEMM=widened"};
  // AMX as oneDNN will use it: ONEDNN_MAX_CPU_ISA may cap it below the CPU's.
  cap_onednn_isa();  // before the query, which fixes oneDNN's ISA
  const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
  if (cpu_features().amx_bf16 && (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & amx) == amx)
    return {Bf16GemmPath::Native, "AMX-BF16 on this CPU"};
  // Without AMX the faster path depends on the CPU (an Intel Cooper Lake runs oneDNN's
  // bf16 GEMM at 0.6x its fp32 one, an AMD Zen 4 at 1.8x): a bf16 run measures both
  // (train/bf16_gemm_paths.h); unmeasured, widened is the safe guess.
  return {Bf16GemmPath::Widened, cpu_features().amx_bf16 ? "the rule, unmeasured: oneDNN capped below AMX"
                                                         : "the rule, unmeasured: no AMX-BF16 on this CPU"};
}

// set_measured_bf16_gemm_paths' paths per layout (-1: none) and their source.
std::atomic<int> g_bf16_measured[kMatmulLayouts] = {-1, -1, -1};
std::mutex g_bf16_measured_mu;
std::string g_bf16_measured_source;

bool widen_bf16(bool trans_a, bool trans_b) {
  if (active_isa() < Isa::Avx512) return true;
  const int o = g_bf16_path_override.load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<Bf16GemmPath>(o) == Bf16GemmPath::Widened;
  static const std::optional<Bf16GemmPath> env = env_path();  // the environment, read once
  if (env) return *env == Bf16GemmPath::Widened;
  const int m = g_bf16_measured[static_cast<int>(matmul_layout(trans_a, trans_b))].load(std::memory_order_relaxed);
  if (m >= 0) return static_cast<Bf16GemmPath>(m) == Bf16GemmPath::Widened;
  static const Bf16GemmPath rule = rule_choice().path;
  return rule == Bf16GemmPath::Widened;
}

}  // namespace

struct MatmulContext::Impl {
  static dnnl::engine make_engine() {
    cap_onednn_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }

  dnnl::engine engine = make_engine();
  dnnl::stream stream{engine};
  std::unordered_map<Key, Entry, KeyHash> cache;
  // Operand copies: bf16 roundings of fp32 operands under Precision::BF16, or fp32
  // widenings on the widened path; grown, never shrunk.
  AlignedBuffer<bf16> scratch_a, scratch_b;
  AlignedBuffer<float> wide_a, wide_b;
  AlignedBuffer<float> sum;  // an accumulating matmul's product, a block of rows at a time

  // Creates the primitive for k; a BF16 key whose bf16 primitive oneDNN cannot make gets
  // the widened fp32 one.
  Entry create(const Key& k, bool widened) {
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    const dt in = k.p == Precision::BF16 && !widened ? dt::bf16 : dt::f32;
    // Row-major A [M,K] has strides {K,1}; stored as [K,M] (trans_a) it is {1,M}.
    const int64_t lda = k.lda > 0 ? k.lda : (k.trans_a ? k.M : k.K);
    dnnl::memory::desc a_md(dims{k.M, k.K}, in, k.trans_a ? dims{1, lda} : dims{lda, 1});
    dnnl::memory::desc b_md(dims{k.K, k.N}, in, k.trans_b ? dims{1, k.K} : dims{k.N, 1});
    dnnl::memory::desc c_md(dims{k.M, k.N}, dt::f32, dims{k.N, 1});
    dnnl::primitive_attr attr;
    dnnl::matmul::desc desc =
        k.bias ? dnnl::matmul::desc(a_md, b_md, dnnl::memory::desc(dims{1, k.N}, dt::f32, dims{k.N, 1}), c_md)
               : dnnl::matmul::desc(a_md, b_md, c_md);
    Entry e;
    e.pd = dnnl::matmul::primitive_desc(desc, attr, engine);
    e.prim = dnnl::matmul(e.pd);
    e.widened = widened;
    return e;
  }

  const Entry& get(const Key& k) {
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
    const ThreadCount threads(k.threads);  // oneDNN reads the count at creation
    const std::string where = "matmul M=" + std::to_string(k.M) + " N=" + std::to_string(k.N) +
                              " K=" + std::to_string(k.K);
    if (k.p == Precision::BF16 && !k.widen) {
      try {
        return cache.emplace(k, create(k, false)).first->second;
      } catch (const dnnl::error& err) {
        if (err.status != dnnl_unimplemented)
          throw Error(std::string("oneDNN could not create a bf16 matmul primitive: ") + err.what(), where,
                      "rerun with LT_CPU=avx2 to use the widened fp32 path, and report this");
      }  // no bf16 kernel for this CPU: widen below
    }
    try {
      return cache.emplace(k, create(k, k.p == Precision::BF16)).first->second;
    } catch (const dnnl::error& err) {
      // fp32 matmuls exist on every x86-64 CPU: failing here is the library, not the CPU.
      throw Error(std::string("oneDNN could not create an fp32 matmul primitive: ") + err.what(), where,
                  "check the oneDNN installation (libdnnl-dev)");
    }
  }

  // C := op(A) op(B) (+ bias) for key k, under its thread count, on prepared operands
  // (bf16, or fp32: widened when the whole call's entry is).
  void execute(const Key& k, bool widened, float* c, const void* pa, const void* pb, const float* bias) {
    const ThreadCount threads(k.threads);
    const Entry& e = get(k);
    LT_ASSERT(e.widened == widened, "a matmul's row blocks disagree on widening bf16");
    // oneDNN takes non-const handles; inputs are only read.
    dnnl::memory am(e.pd.src_desc(), engine, const_cast<void*>(pa));
    dnnl::memory bm(e.pd.weights_desc(), engine, const_cast<void*>(pb));
    dnnl::memory cm(e.pd.dst_desc(), engine, c);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
    if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(e.pd.bias_desc(), engine, const_cast<float*>(bias)));
    e.prim.execute(stream, args);
    stream.wait();
  }

  // The bf16 pointer to hand oneDNN for an operand of n elements.
  const bf16* as_bf16(MatmulOperand o, size_t n, AlignedBuffer<bf16>& scratch) {
    if (o.b16) return o.b16;
    LT_ASSERT(o.f32, "matmul operand has neither fp32 nor bf16 data");
    if (scratch.size() < n) scratch.resize(n);
    convert_f32_to_bf16(scratch.data(), o.f32, n);
    return scratch.data();
  }

  // The fp32 operand of the widened path: the bf16 values, exactly, as fp32 (a bf16 copy
  // is widened; fp32 data is rounded to bf16 values, as the bf16 path would round it, in
  // the same single pass).
  const float* widened(MatmulOperand o, size_t n, AlignedBuffer<float>& wide) {
    if (o.f32 && o.bf16_exact) return o.f32;  // the caller's rounding, read in place
    if (wide.size() < n) wide.resize(n);
    if (o.b16) {
      convert_to_f32(wide.data(), o.b16, DType::BF16, n);
    } else {
      LT_ASSERT(o.f32, "matmul operand has neither fp32 nor bf16 data");
      round_to_bf16_values(wide.data(), o.f32, n);
    }
    return wide.data();
  }
};

MatmulContext::MatmulContext() : impl_(std::make_unique<Impl>()) {}
MatmulContext::~MatmulContext() = default;

size_t MatmulContext::cached_primitives() const { return impl_->cache.size(); }

void MatmulContext::run(float* c, MatmulOperand a, bool trans_a, MatmulOperand b, bool trans_b,
                        int64_t M, int64_t N, int64_t K, bool accumulate, Precision p,
                        const float* bias) {
  LT_ASSERT(M >= 0 && N >= 0 && K >= 0, "negative matmul size");
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: oneDNN rejects zero dims, and the answer is plain
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        c[i * N + j] = (accumulate ? c[i * N + j] : 0.0f) + (bias ? bias[j] : 0.0f);
    return;
  }
  // Accumulating, the product runs in blocks of rows into scratch (see the top).
  const int64_t rows = accumulate ? std::clamp<int64_t>(kAccumulateFloats / N, 1, M) : M;
  auto key_for = [&](int64_t block_rows) {
    return Key{block_rows, N, K, trans_a, trans_b, bias != nullptr, p, block_rows == M ? 0 : (trans_a ? M : K)};
  };
  const bool widened = impl_->get(key_for(rows)).widened;  // every block's entry alike
  const void* pa;
  const void* pb;
  size_t a_bytes = sizeof(float);  // per element of what pa points to
  if (widened) {
    pa = impl_->widened(a, size_t(M * K), impl_->wide_a);
    pb = impl_->widened(b, size_t(K * N), impl_->wide_b);
  } else if (p == Precision::BF16) {
    pa = impl_->as_bf16(a, size_t(M * K), impl_->scratch_a);
    pb = impl_->as_bf16(b, size_t(K * N), impl_->scratch_b);
    a_bytes = sizeof(bf16);
  } else {
    LT_ASSERT(a.f32 && b.f32, "Precision::F32 matmul needs fp32 operands");
    pa = a.f32;
    pb = b.f32;
  }
  if (!accumulate) {
    impl_->execute(key_for(M), widened, c, pa, pb, bias);
    return;
  }
  if (impl_->sum.size() < size_t(rows * N)) impl_->sum.resize(size_t(rows * N));
  float* sum = impl_->sum.data();
  for (int64_t m0 = 0; m0 < M; m0 += rows) {
    const int64_t mb = std::min(rows, M - m0);
    // Rows m0.. of op(A): rows of A, or (trans_a) columns of the stored [K,M].
    const void* a_block = static_cast<const std::byte*>(pa) + size_t(trans_a ? m0 : m0 * K) * a_bytes;
    impl_->execute(key_for(mb), widened, sum, a_block, pb, bias);
    float* out = c + m0 * N;
    const int64_t n = mb * N;
#pragma omp parallel for schedule(static) if (n >= kParallelAddFloats)
    for (int64_t i = 0; i < n; ++i) out[i] += sum[i];
  }
}

std::string MatmulContext::impl_name(int64_t M, int64_t N, int64_t K, bool trans_a,
                                     bool trans_b, Precision p) {
  const Entry& e = impl_->get(Key{M, N, K, trans_a, trans_b, false, p});
  return std::string(e.pd.impl_info_str()) + (e.widened ? " (bf16 widened to f32)" : "");
}

namespace {

// The free functions (matmul, matmul_bf16, matmul_impl_name) have no context parameter:
// their callers (linear, the head, attention) are plain functions with fixed contracts.
// So they share one process-wide context. It is created on first use (after
// set_num_threads, so oneDNN sees the configured OpenMP thread count), and a mutex
// serializes callers, because the cache and the bf16 scratch are shared. Each call
// already uses all OpenMP threads, so serializing costs nothing in the normal flow;
// callers that want concurrent matmuls own a MatmulContext each.
struct DefaultContext {
  std::mutex mu;
  MatmulContext ctx;
};
DefaultContext& default_context() {
  static DefaultContext d;
  return d;
}

}  // namespace

void matmul_ex(float* c, MatmulOperand a, bool trans_a, MatmulOperand b, bool trans_b, int64_t M,
               int64_t N, int64_t K, bool accumulate, Precision p, const float* bias) {
  DefaultContext& d = default_context();
  std::lock_guard<std::mutex> lock(d.mu);
  d.ctx.run(c, a, trans_a, b, trans_b, M, N, K, accumulate, p, bias);
}

void matmul(float* c, const float* a, bool trans_a, const float* b, bool trans_b, int64_t M,
            int64_t N, int64_t K, bool accumulate, Precision p) {
  matmul_ex(c, MatmulOperand{a, nullptr}, trans_a, MatmulOperand{b, nullptr}, trans_b, M, N, K,
            accumulate, p);
}

void matmul_bf16(float* c, const bf16* a, bool trans_a, const bf16* b, bool trans_b, int64_t M,
                 int64_t N, int64_t K, bool accumulate) {
  matmul_ex(c, MatmulOperand{nullptr, a}, trans_a, MatmulOperand{nullptr, b}, trans_b, M, N, K,
            accumulate, Precision::BF16);
}

std::string matmul_impl_name(int64_t M, int64_t N, int64_t K, Precision p) {
  DefaultContext& d = default_context();
  std::lock_guard<std::mutex> lock(d.mu);
  return d.ctx.impl_name(M, N, K, false, false, p);
}

MatmulLayout matmul_layout(bool trans_a, bool trans_b) {
  if (trans_a && !trans_b) return MatmulLayout::WeightGrad;
  if (!trans_a && !trans_b) return MatmulLayout::InputGrad;
  return MatmulLayout::Forward;
}

bool bf16_gemm_widens(MatmulLayout layout) {
  switch (layout) {
    case MatmulLayout::Forward: return widen_bf16(false, true);
    case MatmulLayout::InputGrad: return widen_bf16(false, false);
    case MatmulLayout::WeightGrad: return widen_bf16(true, false);
  }
  return true;
}

const char* matmul_layout_name(MatmulLayout l) {
  switch (l) {
    case MatmulLayout::Forward: return "x.W^T";
    case MatmulLayout::InputGrad: return "dy.W";
    case MatmulLayout::WeightGrad: return "dy^T.x";
  }
  return "?";
}

Bf16GemmChoice bf16_gemm_choice(MatmulLayout layout) {
  (void)env_path();  // checked at every level
  if (active_isa() < Isa::Avx512)
    return {Bf16GemmPath::Widened, "kernels below the avx512 level: oneDNN has no bf16 matmul there"};
  const int o = g_bf16_path_override.load(std::memory_order_relaxed);
  if (o >= 0) return {static_cast<Bf16GemmPath>(o), "set for this process"};
  if (!env_path()) {
    const int m = g_bf16_measured[static_cast<int>(layout)].load(std::memory_order_relaxed);
    if (m >= 0) {
      std::lock_guard<std::mutex> lock(g_bf16_measured_mu);
      return {static_cast<Bf16GemmPath>(m), g_bf16_measured_source};
    }
  }
  return rule_choice();
}

void set_measured_bf16_gemm_paths(const std::optional<Bf16GemmMeasured>& measured) {
  std::lock_guard<std::mutex> lock(g_bf16_measured_mu);
  g_bf16_measured_source = measured ? measured->source : std::string();
  for (int l = 0; l < kMatmulLayouts; ++l)
    g_bf16_measured[l].store(measured ? static_cast<int>(measured->path[l]) : -1, std::memory_order_relaxed);
}

void set_bf16_gemm_path(std::optional<Bf16GemmPath> path) {
  g_bf16_path_override.store(path ? static_cast<int>(*path) : -1, std::memory_order_relaxed);
}

std::string matmul_bf16_path() {
  // Each layout's path as a 256^3 product of it takes it, and why.
  std::string parts[kMatmulLayouts], reason;
  bool all_same = true;
  for (int l = 0; l < kMatmulLayouts; ++l) {
    const auto layout = static_cast<MatmulLayout>(l);
    const bool ta = layout == MatmulLayout::WeightGrad, tb = layout == MatmulLayout::Forward;
    std::string impl;
    {
      DefaultContext& d = default_context();
      std::lock_guard<std::mutex> lock(d.mu);
      impl = d.ctx.impl_name(256, 256, 256, ta, tb, Precision::BF16);
    }
    const bool widened = impl.find("widened") != std::string::npos;
    const Bf16GemmChoice choice = bf16_gemm_choice(layout);
    std::string why = choice.reason;
    if (widened && choice.path == Bf16GemmPath::Native)
      why = "oneDNN has no bf16 matmul for this CPU";  // the fallback in get()
    parts[l] = (widened ? "bf16 storage, fp32 GEMM (" : "native bf16 GEMM (") + impl;
    if (l == 0) reason = why;
    all_same = all_same && parts[l] == parts[0] && why == reason;
  }
  if (all_same) return parts[0] + "; " + reason + ")";
  std::string out;
  for (int l = 0; l < kMatmulLayouts; ++l)
    out += std::string(l ? ", " : "") + matmul_layout_name(static_cast<MatmulLayout>(l)) + ": " + parts[l] + ")";
  return out + " (" + reason + ")";
}

}  // namespace lt
