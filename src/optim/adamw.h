// AdamW with fp32 states and the hybrid 8-bit AdamW, one object for both.
//
// The executor registers every parameter tensor once, then calls step_tensor() per tensor
// from its lazy-update hook (in any order, from one thread at a time per tensor; the call
// threads the work itself). One call makes the whole fused pass: clip, moments, decoupled
// weight decay, bias correction, parameter write, state requantization, bf16 compute copy.
//
// State formats, chosen at registration:
//   Q8:  m and v as 8-bit codes into the signed / unsigned dynamic maps (quant_map.h), with
//        one fp32 absmax per block of `block_size` elements: 2 + 8 / block_size bytes per
//        parameter (2.03 at the default 256).
//   F32: fp32 m and v, 8 bytes per parameter. Used when eight_bit is off, for tensors under
//        min_8bit_numel elements, and for tensors registered with keep_fp32.
//
// Typical step (see grad_clip.h for the non-finite policy):
//   ClipDecision d = clip_decision(sum_sq_of_all_grads, max_norm);
//   if (!d.finite) { report; skip the step; }
//   else for each tensor: opt.step_tensor(id, p, g, bf16_copy, lr, d.clip_factor, step);
//
// State storage: one contiguous region per tensor, every section at a 64-byte aligned
// offset, state_bytes(id) bytes in all (a multiple of 64):
//   F32: m [n] f32 | v [n] f32
//   Q8 : m codes [n] u8 | v codes [n] u8 | m absmax [nb] f32 | v absmax [nb] f32
// All-zero bytes are the zero (initial) state in both formats. AdamW owns the region of an
// ordinary tensor; a paged tensor (AdamWTensorOptions::paged) uses caller memory attached
// by attach_state(), so its state can live on NVMe and be staged only around its update.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/dtype.h"
#include "optim/adamw_kernels.h"
#include "optim/adamw_math.h"

namespace lt {

enum class StateFormat : uint8_t { F32 = 0, Q8 = 1 };
// Which kernel table (adamw_kernels.h) the steps run. Auto: the level in force when the
// AdamW is constructed (active_isa(): the CPU, capped by LT_CPU and a test's ScopedIsaCap).
// Avx512: the AVX-512 kernels, with the VBMI + BF16 extensions when cpu_features() has both;
// Avx512NoVbmi: the same without them (what AVX-512 CPUs lacking either run; for tests).
// A forced level the CPU lacks, or that LT_CPU caps away, is an lt::Error.
enum class AdamWKernel : uint8_t { Auto, Scalar, Avx2, Avx512, Avx512NoVbmi };

// The kernel table a config's `kernel` selects (what AdamW's constructor uses; tests call
// the table's map helpers directly). lt::Error for a forced variant that cannot run here.
const AdamWKernels& adamw_kernels(AdamWKernel kernel);

struct AdamWConfig {
  AdamWHyper hyper;
  bool eight_bit = true;          // false: plain fp32 AdamW for every tensor
  int64_t block_size = 256;       // quantization (and non-finite guard) block; multiple of 16
  int64_t min_8bit_numel = 4096;  // smaller tensors keep fp32 state
  int num_threads = 0;            // 0: lt::num_threads()
  AdamWKernel kernel = AdamWKernel::Auto;  // Auto: the kernels of active_isa()
};

struct AdamWTensorOptions {
  bool keep_fp32 = false;     // fp32 state regardless of size (embeddings, say)
  float weight_decay = -1.f;  // < 0: the config's weight decay; 0 for norms and biases
  bool paged = false;         // AdamW holds no state: the caller attaches it (attach_state)
};

struct StepReport {
  int64_t skipped_blocks = 0;  // blocks left unchanged because their gradient was NaN/Inf
  bool ok() const { return skipped_blocks == 0; }
};

// Stages paged tensors' states one at a time for AdamW::save / AdamW::load(path, pager);
// the exact contract is at those functions.
struct AdamWStatePager {
  // On return, tensor id must be attached (attach_state): save reads its state from there,
  // load overwrites all state_bytes(id) bytes of it. It may already be attached.
  std::function<void(int id)> page_in;
  // AdamW is done with id: modified is false after save read it, true after load wrote it
  // (persist it, e.g. write it back to NVMe). The caller may detach id now or later.
  std::function<void(int id, bool modified)> page_out;
};

class AdamW {
 public:
  explicit AdamW(const AdamWConfig& cfg = {});

  // Registers a tensor of n elements; returns its id (0, 1, 2, ... in order). States start
  // at zero. Names must be unique: save/load matches tensors by name.
  int add_tensor(const std::string& name, int64_t n, const AdamWTensorOptions& opt = {});

  // One fused update of tensor id. param: [n] fp32 master, updated in place; grad: [n];
  // compute_out: [n] bf16 copy of the new param, or null. step is 1-based.
  StepReport step_tensor(int id, float* param, const float* grad, bf16* compute_out, float lr,
                         float clip_factor, int64_t step);
  StepReport step_tensor(int id, float* param, const bf16* grad, bf16* compute_out, float lr,
                         float clip_factor, int64_t step);

  int num_tensors() const { return static_cast<int>(tensors_.size()); }
  const std::string& name(int id) const;
  int64_t numel(int id) const;
  StateFormat format(int id) const;
  const AdamWConfig& config() const { return cfg_; }
  // The kernel variant the steps run: "scalar", "avx2", "avx512", "avx512+vbmi+bf16".
  const char* kernel_name() const { return kernels_->name; }
  // Bytes of the m and v states (codes and absmax, or fp32) of all tensors, owned and
  // paged alike, without the layout's alignment padding (< 256 bytes a tensor).
  size_t state_bytes() const;
  // The part of state_bytes() that AdamW itself holds (tensors that are not paged).
  size_t resident_state_bytes() const;
  // Bytes of tensor id's state region, padding included (what attach_state needs).
  size_t state_bytes(int id) const;
  // What state_bytes() would count for a tensor of n elements registered with opt.
  size_t state_bytes_for(int64_t n, const AdamWTensorOptions& opt = {}) const;

  // Paged tensors only (lt::Error otherwise). storage: 64-byte aligned, state_bytes(id)
  // bytes, zero-filled for a fresh state; used by step_tensor, save and load until
  // detach_state or the next attach. Stepping a paged tensor with nothing attached is a bug.
  void attach_state(int id, std::byte* storage);
  void detach_state(int id);
  bool is_paged(int id) const;

  // The state_bytes(id) bytes of tensor id's state region, owned or attached (null when a
  // paged tensor is paged out): to copy a state whole, say to another rank.
  const std::byte* state_data(int id) const { return at(id).storage(); }

  // Raw views of one tensor's state (tests, device copies), owned or attached. The format
  // must match.
  AdamW8State q8_state(int id);
  AdamW32State f32_state(int id);

  // Bit-exact state file (format in adamw_state_file.cpp). load() needs the same tensors
  // (names, sizes, formats) and block size registered; it throws lt::Error on any mismatch,
  // truncation or corruption, and then leaves the current state untouched. Paged tensors
  // are saved from and loaded into their attached storage (lt::Error if any paged tensor
  // has none), so every paged state must be staged at once; load also holds a scratch copy
  // of every state until the file checks out: O(all states) extra memory.
  void save(const std::string& path) const;
  void load(const std::string& path);

  // The same file, byte for byte, with the paged states staged one tensor at a time by the
  // pager (both functions must be set when any tensor is paged; lt::Error otherwise).
  // Contract: for each paged tensor id, in increasing id order (owned tensors get no calls):
  //   1. pager.page_in(id). On return id must be attached: save, with its current state;
  //      load, with any writable storage of state_bytes(id) bytes (its contents are ignored,
  //      all of them are overwritten, padding with zeros). id may already be attached (say
  //      the caller attached a group of consecutive ids at the group's first id): then
  //      page_in may do nothing. lt::Error if id is still paged out afterwards.
  //   2. AdamW reads (save) or writes (load) the storage attached to id, and no other paged
  //      storage, then calls pager.page_out(id, modified), modified = false in save, true
  //      in load (the storage now holds the loaded state: persist it). From then on AdamW
  //      does not touch id's storage again, so the caller may detach id, or keep it until
  //      the page_out of its group's last id.
  // The pairs never overlap: page_out(id) returns before page_in of the next paged id.
  // AdamW never attaches or detaches itself; paged ids attached before the call are paged
  // in and out like the others and stay as the pager leaves them.
  // load(path, pager) makes two passes over the (once opened) file. The first reads it
  // through, checking the header, every tensor's name, size and format, the hash and the
  // end, without calling the pager and without keeping payloads; any failure there throws
  // lt::Error and changes no state, owned or paged (page_out(id, true) is never called).
  // The second reads it again and writes each payload straight into its state: owned ones
  // into AdamW's regions, paged ones between page_in(id) and page_out(id, true). If the
  // bytes of the second pass disagree with the first (the file was rewritten in place in
  // between, or the disk returned other bytes) load throws lt::Error saying so, and then
  // the states written so far, owned ones and paged ones already paged out as modified,
  // may hold the file's new bytes: restore from another checkpoint. (save() replaces a
  // file by renaming, which does not disturb a load that has it open.)
  // If save or load throws, page_out is not called for the id in flight: the caller must
  // detach whatever its pager still holds attached, and in load must not persist the id
  // in flight (it may be half written; ids already paged out hold loaded states). Exceptions
  // thrown by the pager, and the lt::Error for a page_in that left its id paged out,
  // propagate as they are; in load's second pass the states written before them stay
  // loaded. A failed save leaves no file behind (nor its .tmp).
  // Memory: AdamW allocates at most one 1 MiB read buffer; the staged states are the
  // pager's, one tensor (or one group) at a time, so the peak extra memory is O(the
  // largest tensor's or group's state), not O(all states). The price: load reads and
  // hashes the file twice.
  void save(const std::string& path, const AdamWStatePager& pager) const;
  void load(const std::string& path, const AdamWStatePager& pager);

 private:
  struct Tensor {
    std::string name;
    int64_t n = 0;
    StateFormat format = StateFormat::F32;
    float weight_decay = 0.f;
    bool paged = false;
    AlignedBuffer<std::byte> owned;  // the state region; empty when paged
    std::byte* attached = nullptr;   // paged: the caller's region, or null (paged out)
    std::byte* storage() { return paged ? attached : owned.data(); }
    const std::byte* storage() const { return paged ? attached : owned.data(); }
  };
  // Byte offsets of the sections in a tensor's region (F32 uses m and v only).
  struct Layout {
    size_t m = 0, v = 0, m_absmax = 0, v_absmax = 0, total = 0;
  };
  Layout layout(const Tensor& t) const;
  StateFormat format_for(int64_t n, const AdamWTensorOptions& opt) const;
  struct Section {
    size_t offset, bytes;
  };
  // t's sections in layout (and state file) order, without the padding.
  std::vector<Section> sections(const Tensor& t) const;
  int64_t num_blocks(const Tensor& t) const { return (t.n + cfg_.block_size - 1) / cfg_.block_size; }
  static AdamW8State q8_view(Tensor& t, const Layout& l);
  static AdamW32State f32_view(Tensor& t, const Layout& l);
  StepReport step(int id, AdamWTensorArgs args, float lr, float clip_factor, int64_t step);
  void save_file(const std::string& path, const AdamWStatePager* pager) const;
  void check_pager(const AdamWStatePager& pager, const char* where) const;
  Tensor& at(int id);
  const Tensor& at(int id) const;

  AdamWConfig cfg_;
  const AdamWKernels* kernels_ = nullptr;
  std::vector<Tensor> tensors_;
};

}  // namespace lt
