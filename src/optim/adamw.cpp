#include "optim/adamw.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/threads.h"

namespace lt {

namespace {
// Below this many blocks per thread, threads cost more than they save.
constexpr int64_t kMinBlocksPerThread = 16;
// Smallest work unit of the threaded step (64 blocks of the default 256 elements, ~5 us).
constexpr int64_t kChunkBlocks = 64;
constexpr size_t kStateAlign = 64;
size_t align_up(size_t x) { return (x + kStateAlign - 1) / kStateAlign * kStateAlign; }

}  // namespace

// The table of `kernel`: Auto follows active_isa(); a forced level must be runnable here.
const AdamWKernels& adamw_kernels(AdamWKernel kernel) {
  Isa isa = active_isa();
  switch (kernel) {
    case AdamWKernel::Auto: break;
    case AdamWKernel::Scalar: isa = Isa::Scalar; break;
    case AdamWKernel::Avx2: isa = Isa::Avx2; break;
    case AdamWKernel::Avx512:
    case AdamWKernel::Avx512NoVbmi: isa = Isa::Avx512; break;
  }
  if (kernel != AdamWKernel::Auto) {
    std::string why = isa_missing(isa);
    if (why.empty() && isa > isa_cap()) why = "LT_CPU caps the kernels at " + std::string(isa_name(isa_cap()));
    if (!why.empty())
      throw Error("the " + std::string(isa_name(isa)) + " AdamW kernels were requested but " + why,
                  "AdamWConfig::kernel", "use AdamWKernel::Auto");
  }
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::Scalar: return isa_scalar::kAdamWKernels;
    case Isa::Avx2: return isa_avx2::kAdamWKernels;
    case Isa::Avx512:
      return kernel != AdamWKernel::Avx512NoVbmi && f.avx512vbmi && f.avx512bf16
                 ? isa_avx512::kAdamWKernelsVbmiBf16
                 : isa_avx512::kAdamWKernels;
  }
  return isa_scalar::kAdamWKernels;
}

AdamW::AdamW(const AdamWConfig& cfg) : cfg_(cfg) {
  if (cfg.block_size < 16 || cfg.block_size % 16 != 0 || cfg.block_size > kMaxAdamWBlock)
    throw Error("block size " + std::to_string(cfg.block_size) + " is not a multiple of 16 in [16, " +
                    std::to_string(kMaxAdamWBlock) + "]",
                "AdamWConfig::block_size", "use 256 (the default) or another multiple of 16");
  kernels_ = &adamw_kernels(cfg.kernel);
}

int AdamW::add_tensor(const std::string& name, int64_t n, const AdamWTensorOptions& opt) {
  if (n <= 0) throw Error("tensor size " + std::to_string(n) + " is not positive", name, "");
  for (const Tensor& t : tensors_)
    if (t.name == name) throw Error("tensor registered twice", name, "give each tensor a unique name");
  Tensor t;
  t.name = name;
  t.n = n;
  t.weight_decay = opt.weight_decay < 0 ? cfg_.hyper.weight_decay : opt.weight_decay;
  t.format = format_for(n, opt);
  t.paged = opt.paged;
  // Owned regions start all-zero like a fresh paged one (absmax 0 decodes every code to 0),
  // so where a tensor's state lives cannot change a bit: m codes of 0 decode to -0, not the
  // +0 of the code of 0, which shows in a -0 parameter with a -0 gradient.
  if (!t.paged) t.owned.resize(layout(t).total);
  tensors_.push_back(std::move(t));
  return static_cast<int>(tensors_.size()) - 1;
}

StateFormat AdamW::format_for(int64_t n, const AdamWTensorOptions& opt) const {
  return cfg_.eight_bit && !opt.keep_fp32 && n >= cfg_.min_8bit_numel ? StateFormat::Q8 : StateFormat::F32;
}

size_t AdamW::state_bytes_for(int64_t n, const AdamWTensorOptions& opt) const {
  Tensor t;
  t.n = n;
  t.format = format_for(n, opt);
  size_t b = 0;
  for (const Section& x : sections(t)) b += x.bytes;
  return b;
}

AdamW::Tensor& AdamW::at(int id) {
  LT_ASSERT(id >= 0 && id < num_tensors(), "bad tensor id " + std::to_string(id));
  return tensors_[id];
}
const AdamW::Tensor& AdamW::at(int id) const {
  LT_ASSERT(id >= 0 && id < num_tensors(), "bad tensor id " + std::to_string(id));
  return tensors_[id];
}
const std::string& AdamW::name(int id) const { return at(id).name; }
int64_t AdamW::numel(int id) const { return at(id).n; }
StateFormat AdamW::format(int id) const { return at(id).format; }

bool AdamW::is_paged(int id) const { return at(id).paged; }

AdamW::Layout AdamW::layout(const Tensor& t) const {
  Layout l;
  const size_t n = static_cast<size_t>(t.n);
  if (t.format == StateFormat::F32) {
    l.v = align_up(sizeof(float) * n);
    l.total = align_up(l.v + sizeof(float) * n);
  } else {
    const size_t nb = static_cast<size_t>(num_blocks(t));
    l.v = align_up(n);
    l.m_absmax = align_up(l.v + n);
    l.v_absmax = align_up(l.m_absmax + sizeof(float) * nb);
    l.total = align_up(l.v_absmax + sizeof(float) * nb);
  }
  return l;
}

std::vector<AdamW::Section> AdamW::sections(const Tensor& t) const {
  const Layout l = layout(t);
  const size_t n = static_cast<size_t>(t.n);
  if (t.format == StateFormat::F32) return {{l.m, sizeof(float) * n}, {l.v, sizeof(float) * n}};
  const size_t nb = static_cast<size_t>(num_blocks(t));
  return {{l.m, n}, {l.v, n}, {l.m_absmax, sizeof(float) * nb}, {l.v_absmax, sizeof(float) * nb}};
}

size_t AdamW::state_bytes(int id) const { return layout(at(id)).total; }

size_t AdamW::state_bytes() const {
  size_t b = 0;
  for (const Tensor& t : tensors_)
    for (const Section& x : sections(t)) b += x.bytes;
  return b;
}

size_t AdamW::resident_state_bytes() const {
  size_t b = 0;
  for (const Tensor& t : tensors_)
    if (!t.paged)
      for (const Section& x : sections(t)) b += x.bytes;
  return b;
}

void AdamW::attach_state(int id, std::byte* storage) {
  Tensor& t = at(id);
  if (!t.paged)
    throw Error("attach_state on a tensor whose state AdamW owns", t.name,
                "register the tensor with AdamWTensorOptions::paged to supply its state memory");
  if (!storage) throw Error("attach_state with null storage", t.name, "use detach_state to page the state out");
  if (reinterpret_cast<uintptr_t>(storage) % kStateAlign != 0)
    throw Error("state storage is not 64-byte aligned", t.name,
                "allocate it 64-byte aligned (AlignedBuffer, std::aligned_alloc(64, ...))");
  t.attached = storage;
}

void AdamW::detach_state(int id) {
  Tensor& t = at(id);
  if (!t.paged)
    throw Error("detach_state on a tensor whose state AdamW owns", t.name, "detach only paged tensors");
  t.attached = nullptr;
}

AdamW8State AdamW::q8_view(Tensor& t, const Layout& l) {
  std::byte* base = t.storage();
  LT_ASSERT(base, "the state of " + t.name + " is paged out: attach_state() before using it");
  return {reinterpret_cast<uint8_t*>(base + l.m), reinterpret_cast<uint8_t*>(base + l.v),
          reinterpret_cast<float*>(base + l.m_absmax), reinterpret_cast<float*>(base + l.v_absmax)};
}

AdamW32State AdamW::f32_view(Tensor& t, const Layout& l) {
  std::byte* base = t.storage();
  LT_ASSERT(base, "the state of " + t.name + " is paged out: attach_state() before using it");
  return {reinterpret_cast<float*>(base + l.m), reinterpret_cast<float*>(base + l.v)};
}

AdamW8State AdamW::q8_state(int id) {
  Tensor& t = at(id);
  LT_ASSERT(t.format == StateFormat::Q8, t.name + " has fp32 state");
  return q8_view(t, layout(t));
}

AdamW32State AdamW::f32_state(int id) {
  Tensor& t = at(id);
  LT_ASSERT(t.format == StateFormat::F32, t.name + " has 8-bit state");
  return f32_view(t, layout(t));
}

StepReport AdamW::step_tensor(int id, float* param, const float* grad, bf16* compute_out, float lr,
                              float clip_factor, int64_t step_no) {
  AdamWTensorArgs a;
  a.param = param;
  a.grad_f32 = grad;
  a.out_bf16 = compute_out;
  return step(id, a, lr, clip_factor, step_no);
}

StepReport AdamW::step_tensor(int id, float* param, const bf16* grad, bf16* compute_out, float lr,
                              float clip_factor, int64_t step_no) {
  AdamWTensorArgs a;
  a.param = param;
  a.grad_bf16 = grad;
  a.out_bf16 = compute_out;
  return step(id, a, lr, clip_factor, step_no);
}

StepReport AdamW::step(int id, AdamWTensorArgs a, float lr, float clip_factor, int64_t step_no) {
  Tensor& t = at(id);
  LT_ASSERT(a.param && (a.grad_f32 || a.grad_bf16), "null parameter or gradient for " + t.name);
  LT_ASSERT(t.storage(), "step_tensor on " + t.name + " while its state is paged out: attach_state() first");
  AdamWHyper h = cfg_.hyper;
  h.weight_decay = t.weight_decay;
  const AdamWStepConsts c = make_step_consts(h, lr, clip_factor, step_no);
  a.n = t.n;
  a.block = cfg_.block_size;
  const int64_t nb = num_blocks(t);
  AdamW8State s8;
  AdamW32State s32;
  if (t.format == StateFormat::Q8)
    s8 = q8_view(t, layout(t));
  else
    s32 = f32_view(t, layout(t));

  // Contiguous ranges of whole blocks per thread: each block's result depends on that block
  // alone, so the split (and the thread count) cannot change a bit of the output.
  auto run = [&](int64_t b0, int64_t b1) -> int64_t {
    if (t.format == StateFormat::Q8) return kernels_->adamw8(a, s8, c, b0, b1);
    return kernels_->adamw32(a, s32, c, b0, b1);
  };
  const int want = cfg_.num_threads > 0 ? cfg_.num_threads : num_threads();
  const int nt = static_cast<int>(std::clamp<int64_t>(nb / kMinBlocksPerThread, 1, want));
  StepReport r;
  if (nt == 1) {
    r.skipped_blocks = run(0, nb);
    return r;
  }
  // Guided schedule over units of up to kChunkBlocks: each thread first takes about its static
  // share, then the rest is handed out in shrinking pieces, so on a shared host a thread
  // that starts late (woken after a busy CPU frees up) leaves its share to the others
  // instead of stalling the whole step (measured: as fast as a static split when the CPUs
  // are free; plain dynamic 64-block units cost ~10%, from scattered streams). Blocks are
  // independent, so the bits do not depend on which thread runs which unit.
  const int64_t unit = std::clamp<int64_t>(nb / (4 * nt), 1, kChunkBlocks);  // small tensors: still split
  const int64_t nunits = (nb + unit - 1) / unit;
  int64_t skipped = 0;
#pragma omp parallel for num_threads(nt) schedule(guided) reduction(+ : skipped)
  for (int64_t u = 0; u < nunits; ++u) skipped += run(u * unit, std::min(nb, (u + 1) * unit));
  r.skipped_blocks = skipped;
  return r;
}

}  // namespace lt
