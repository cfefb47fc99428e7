// Matmul through oneDNN's C++ API. Transposes are strides on the memory descriptors (no
// copies); `accumulate` is a sum post-op; bias is oneDNN's fused bias argument.
// Creating a primitive costs ~ms, and a training step repeats the same few shapes, so
// each MatmulContext caches its primitives by the full key of what was asked.
#include "kernels/cpu/matmul.h"

#include <omp.h>

#include <mutex>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/aligned_buffer.h"
#include "core/error.h"

namespace lt {
namespace {

// Below this many flops a matmul runs on one thread: a few microseconds of work, where an
// OpenMP fork/join costs as much on an idle machine, and a whole scheduler tick (ms) when
// the other core is busy (decoding steps, attention's small products, the tests).
constexpr double kSerialFlops = 1 << 21;

int threads_for(int64_t M, int64_t N, int64_t K) {
  return 2.0 * double(M) * double(N) * double(K) < kSerialFlops ? 1 : omp_get_max_threads();
}

// oneDNN fixes a primitive's work split for the thread count at creation and runs that
// many threads whatever omp_set_num_threads says later, so the count is part of the key:
// set_num_threads then takes effect on the next call.
struct Key {
  int64_t M, N, K;
  bool trans_a, trans_b, accumulate, bias;
  Precision p;
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
    mix((k.trans_a ? 1u : 0u) | (k.trans_b ? 2u : 0u) | (k.accumulate ? 4u : 0u) |
        (k.bias ? 8u : 0u) | (k.p == Precision::BF16 ? 16u : 0u));
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
};

}  // namespace

struct MatmulContext::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<Key, Entry, KeyHash> cache;
  // bf16 copies of fp32 operands under Precision::BF16; grown, never shrunk.
  AlignedBuffer<bf16> scratch_a, scratch_b;

  const Entry& get(const Key& k) {
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    const dt in = k.p == Precision::BF16 ? dt::bf16 : dt::f32;
    // Row-major A [M,K] has strides {K,1}; stored as [K,M] (trans_a) it is {1,M}.
    dnnl::memory::desc a_md(dims{k.M, k.K}, in, k.trans_a ? dims{1, k.M} : dims{k.K, 1});
    dnnl::memory::desc b_md(dims{k.K, k.N}, in, k.trans_b ? dims{1, k.K} : dims{k.N, 1});
    dnnl::memory::desc c_md(dims{k.M, k.N}, dt::f32, dims{k.N, 1});
    dnnl::primitive_attr attr;
    if (k.accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const ThreadCount threads(k.threads);  // oneDNN reads the count at creation
    try {
      dnnl::matmul::desc desc =
          k.bias ? dnnl::matmul::desc(a_md, b_md,
                                      dnnl::memory::desc(dims{1, k.N}, dt::f32, dims{k.N, 1}),
                                      c_md)
                 : dnnl::matmul::desc(a_md, b_md, c_md);
      Entry e;
      e.pd = dnnl::matmul::primitive_desc(desc, attr, engine);
      e.prim = dnnl::matmul(e.pd);
      return cache.emplace(k, std::move(e)).first->second;
    } catch (const dnnl::error& err) {
      throw Error(std::string("oneDNN could not create a matmul primitive: ") + err.what(),
                  "matmul M=" + std::to_string(k.M) + " N=" + std::to_string(k.N) +
                      " K=" + std::to_string(k.K),
                  "check the oneDNN installation (libdnnl-dev)");
    }
  }

  // The bf16 pointer to hand oneDNN for an operand of n elements.
  const bf16* as_bf16(MatmulOperand o, size_t n, AlignedBuffer<bf16>& scratch) {
    if (o.b16) return o.b16;
    LT_ASSERT(o.f32, "matmul operand has neither fp32 nor bf16 data");
    if (scratch.size() < n) scratch.resize(n);
    convert_f32_to_bf16(scratch.data(), o.f32, n);
    return scratch.data();
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
  const Key key{M, N, K, trans_a, trans_b, accumulate, bias != nullptr, p};
  const ThreadCount threads(key.threads);
  const Entry& e = impl_->get(key);
  const void* pa;
  const void* pb;
  if (p == Precision::BF16) {
    pa = impl_->as_bf16(a, size_t(M * K), impl_->scratch_a);
    pb = impl_->as_bf16(b, size_t(K * N), impl_->scratch_b);
  } else {
    LT_ASSERT(a.f32 && b.f32, "Precision::F32 matmul needs fp32 operands");
    pa = a.f32;
    pb = b.f32;
  }
  // oneDNN takes non-const handles; inputs are only read.
  dnnl::memory am(e.pd.src_desc(), impl_->engine, const_cast<void*>(pa));
  dnnl::memory bm(e.pd.weights_desc(), impl_->engine, const_cast<void*>(pb));
  dnnl::memory cm(e.pd.dst_desc(), impl_->engine, c);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias)
    args.emplace(DNNL_ARG_BIAS,
                 dnnl::memory(e.pd.bias_desc(), impl_->engine, const_cast<float*>(bias)));
  e.prim.execute(impl_->stream, args);
  impl_->stream.wait();
}

std::string MatmulContext::impl_name(int64_t M, int64_t N, int64_t K, bool trans_a,
                                     bool trans_b, Precision p) {
  return impl_->get(Key{M, N, K, trans_a, trans_b, false, false, p}).pd.impl_info_str();
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

}  // namespace lt
