// Paged AdamW state: a tensor whose m/v live in caller memory, paged through different
// staging buffers between steps, steps bitwise like one whose state AdamW owns (both
// formats, both kernels); the documented layout; all-zero bytes as the zero state; attach
// errors; save/load through the attached storage; save/load through a pager that stages
// one group of consecutive tensors at a time from an external store (bounded staging, the
// same file, all-or-nothing load).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "adamw_test_util.h"
#include "core/aligned_buffer.h"
#include "core/error.h"
#include "optim/adamw.h"
#include "optim/quant_map.h"
#include "test_util.h"

namespace lt {
namespace {

size_t align64(size_t x) { return (x + 63) / 64 * 64; }

// The layout adamw.h documents, computed here independently.
struct Layout {
  size_t m = 0, v = 0, m_absmax = 0, v_absmax = 0, total = 0;
};

Layout expected_layout(StateFormat f, int64_t n, int64_t block) {
  Layout l;
  const size_t un = static_cast<size_t>(n), nb = static_cast<size_t>((n + block - 1) / block);
  if (f == StateFormat::F32) {
    l.v = align64(4 * un);
    l.total = align64(l.v + 4 * un);
  } else {
    l.v = align64(un);
    l.m_absmax = align64(l.v + un);
    l.v_absmax = align64(l.m_absmax + 4 * nb);
    l.total = align64(l.v_absmax + 4 * nb);
  }
  return l;
}

// Tensor id's state assembled from its views at the documented offsets, padding zero.
std::vector<std::byte> region_of(AdamW& opt, int id) {
  const int64_t n = opt.numel(id), B = opt.config().block_size, nb = (n + B - 1) / B;
  const Layout l = expected_layout(opt.format(id), n, B);
  std::vector<std::byte> r(l.total);
  if (opt.format(id) == StateFormat::Q8) {
    const AdamW8State q = opt.q8_state(id);
    std::memcpy(r.data() + l.m, q.m_code, n);
    std::memcpy(r.data() + l.v, q.v_code, n);
    std::memcpy(r.data() + l.m_absmax, q.m_absmax, 4 * nb);
    std::memcpy(r.data() + l.v_absmax, q.v_absmax, 4 * nb);
  } else {
    const AdamW32State f = opt.f32_state(id);
    std::memcpy(r.data() + l.m, f.m, 4 * n);
    std::memcpy(r.data() + l.v, f.v, 4 * n);
  }
  return r;
}

// Stages one paged tensor's state through two buffers, as the executor pages it: after
// each step the bytes move to the other buffer and the old one is poisoned.
class Pager {
 public:
  Pager(AdamW& opt, int id) : opt_(opt), id_(id), bytes_(opt.state_bytes(id)) {
    buf_[0].resize(bytes_);
    buf_[1].resize(bytes_);
    opt.attach_state(id, buf_[0].data());
  }
  void repage() {
    AlignedBuffer<std::byte>& from = buf_[cur_];
    AlignedBuffer<std::byte>& to = buf_[1 - cur_];
    std::memcpy(to.data(), from.data(), bytes_);
    opt_.detach_state(id_);
    std::memset(from.data(), 0xff, bytes_);  // NaN floats, code 255: any stale use shows
    opt_.attach_state(id_, to.data());
    cur_ = 1 - cur_;
  }
  std::byte* data() { return buf_[cur_].data(); }
  std::vector<std::byte> bytes() { return {data(), data() + bytes_}; }

 private:
  AdamW& opt_;
  int id_;
  size_t bytes_;
  AlignedBuffer<std::byte> buf_[2];
  int cur_ = 0;
};

bool same_bf16(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 2 * a.size()) == 0;
}

struct PagedCase {
  bool eight_bit;
  int64_t block;
  int64_t n;
  AdamWKernel kernel;
};

void expect_paged_matches_owned(const PagedCase& c) {
  AdamWConfig cfg;
  cfg.eight_bit = c.eight_bit;
  cfg.block_size = c.block;
  cfg.min_8bit_numel = 1;
  cfg.kernel = c.kernel;
  cfg.num_threads = 2;
  AdamW owned(cfg), paged(cfg);
  // An owned neighbour registered first: the paged tensor is not id 0 and shares its optimizer.
  const AdamWTensorOptions norm_opt{.keep_fp32 = true, .weight_decay = 0.f};
  owned.add_tensor("norm", 40, norm_opt);
  paged.add_tensor("norm", 40, norm_opt);
  const int wo = owned.add_tensor("w", c.n);
  const int wp = paged.add_tensor("w", c.n, {.paged = true});
  ASSERT_FALSE(owned.is_paged(wo));
  ASSERT_TRUE(paged.is_paged(wp));
  ASSERT_FALSE(paged.is_paged(0));
  ASSERT_EQ(paged.format(wp), c.eight_bit ? StateFormat::Q8 : StateFormat::F32);
  Pager pager(paged, wp);

  const int64_t n = c.n;
  std::vector<float> po = test::normal_vector(n, 0.2f, 3), no = test::normal_vector(40, 1.f, 4);
  // -0 parameters with -0 gradients: the one input where the sign of a zero m would show.
  for (int64_t i = 0; i < std::min<int64_t>(n, 3); ++i) po[i] = -0.f;
  std::vector<float> pp = po, np = no;
  std::vector<bf16> oo(n), op(n);
  for (int64_t step = 1; step <= 8; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<float> g = test::spread_gradient(n, 1000 + step);
    if (step == 1)
      for (int64_t i = 0; i < std::min<int64_t>(n, 3); ++i) g[i] = -0.f;
    // Whole zero blocks for two steps: absmax 0 read back from the storage.
    if (step <= 2)
      for (int64_t i = std::max<int64_t>(0, n - 2 * c.block); i < n; ++i) g[i] = 0.f;
    const std::vector<float> gn = test::spread_gradient(40, 2000 + step);
    const float clip = step % 3 == 0 ? 0.5f : 1.f;
    const bool bf16_grad = step % 2 == 0;
    StepReport ro, rp;
    if (bf16_grad) {
      const std::vector<bf16> g16 = test::to_bf16(g);
      ro = owned.step_tensor(wo, po.data(), g16.data(), oo.data(), 1e-3f, clip, step);
      rp = paged.step_tensor(wp, pp.data(), g16.data(), op.data(), 1e-3f, clip, step);
    } else {
      ro = owned.step_tensor(wo, po.data(), g.data(), oo.data(), 1e-3f, clip, step);
      rp = paged.step_tensor(wp, pp.data(), g.data(), op.data(), 1e-3f, clip, step);
    }
    owned.step_tensor(0, no.data(), gn.data(), nullptr, 1e-3f, clip, step);
    paged.step_tensor(0, np.data(), gn.data(), nullptr, 1e-3f, clip, step);
    EXPECT_EQ(ro.skipped_blocks, rp.skipped_blocks);
    ASSERT_TRUE(test::same_bits(po, pp));
    ASSERT_TRUE(same_bf16(oo, op));
    ASSERT_TRUE(test::same_bits(no, np));
    // The owned state, laid out as documented, is the staging buffer byte for byte
    // (padding included), and the paged views read exactly that buffer.
    const std::vector<std::byte> want = region_of(owned, wo);
    ASSERT_EQ(want.size(), paged.state_bytes(wp));
    ASSERT_TRUE(want == pager.bytes());
    ASSERT_TRUE(region_of(paged, wp) == pager.bytes());
    pager.repage();
  }
}

TEST(AdamWPagedState, PagedStepsMatchOwnedBitwise) {
  for (AdamWKernel kernel : {AdamWKernel::Scalar, AdamWKernel::Auto})
    for (bool eight_bit : {false, true})
      for (int64_t block : {16, 256})
        for (int64_t n : {1, 4095, 4097, 70000}) {
          SCOPED_TRACE(std::string(kernel == AdamWKernel::Scalar ? "scalar" : "auto") + (eight_bit ? " Q8" : " F32") +
                       " block " + std::to_string(block) + " n " + std::to_string(n));
          expect_paged_matches_owned({eight_bit, block, n, kernel});
          if (HasFatalFailure()) return;
        }
}

// All-zero bytes are the zero state: absmax 0 decodes every m code to zero, so starting
// from code 0 (value -1, times 0) steps bitwise like starting from the code of 0. Both
// kernels, and they agree with each other.
TEST(AdamWPagedState, ZeroBytesAreTheZeroState) {
  const int64_t n = 4097;
  for (int64_t block : {16, 256}) {
    std::vector<float> ref_p;
    std::vector<std::byte> ref_state;
    for (AdamWKernel kernel : {AdamWKernel::Scalar, AdamWKernel::Auto}) {
      SCOPED_TRACE("block " + std::to_string(block) + (kernel == AdamWKernel::Scalar ? " scalar" : " auto"));
      AdamWConfig cfg;
      cfg.block_size = block;
      cfg.kernel = kernel;
      AdamW opt(cfg);
      const int z = opt.add_tensor("zero_bytes", n, {.paged = true});
      const int c = opt.add_tensor("code_of_zero", n, {.paged = true});
      ASSERT_EQ(opt.format(z), StateFormat::Q8);
      const size_t bytes = opt.state_bytes(z);
      AlignedBuffer<std::byte> sz(bytes), sc(bytes);
      const Layout l = expected_layout(StateFormat::Q8, n, block);
      std::memset(sc.data() + l.m, quantize_nearest(signed_dynamic_map(), 0.f), n);
      ASSERT_NE(std::to_integer<int>(sc[l.m]), 0);
      opt.attach_state(z, sz.data());
      opt.attach_state(c, sc.data());
      std::vector<float> pz = test::normal_vector(n, 0.2f, 9), pc = pz;
      std::vector<bf16> oz(n), oc(n);
      for (int64_t step = 1; step <= 3; ++step) {
        const std::vector<float> g = test::spread_gradient(n, 300 + step);
        opt.step_tensor(z, pz.data(), g.data(), oz.data(), 1e-3f, 0.7f, step);
        opt.step_tensor(c, pc.data(), g.data(), oc.data(), 1e-3f, 0.7f, step);
        ASSERT_TRUE(test::same_bits(pz, pc));
        ASSERT_TRUE(same_bf16(oz, oc));
        ASSERT_EQ(std::memcmp(sz.data(), sc.data(), bytes), 0);
      }
      if (ref_p.empty()) {
        ref_p = pz;
        ref_state.assign(sz.data(), sz.data() + bytes);
      } else {
        EXPECT_TRUE(test::same_bits(ref_p, pz)) << "the kernels disagree from the zero state";
        EXPECT_TRUE(ref_state == std::vector<std::byte>(sz.data(), sz.data() + bytes));
      }
    }
  }
}

TEST(AdamWPagedState, StateBytesFollowTheLayout) {
  AdamWConfig cfg;
  cfg.min_8bit_numel = 16;
  AdamW opt(cfg);
  const int a = opt.add_tensor("a", 10);                                          // F32 (< 16), owned
  const int b = opt.add_tensor("b", 4097, {.paged = true});                       // Q8, paged
  const int c = opt.add_tensor("c", 5000, {.keep_fp32 = true, .paged = true});   // F32, paged
  const int d = opt.add_tensor("d", 70000);                                       // Q8, owned
  const int e = opt.add_tensor("e", 1, {.paged = true});                          // F32 (< 16), paged
  ASSERT_EQ(opt.format(a), StateFormat::F32);
  ASSERT_EQ(opt.format(b), StateFormat::Q8);
  ASSERT_EQ(opt.format(c), StateFormat::F32);
  ASSERT_EQ(opt.format(e), StateFormat::F32);
  for (int id : {a, b, c, d, e}) {
    EXPECT_EQ(opt.state_bytes(id), expected_layout(opt.format(id), opt.numel(id), 256).total) << opt.name(id);
    EXPECT_EQ(opt.state_bytes(id) % 64, 0u) << opt.name(id);
  }
  // Q8 b: codes 4097 -> 4160 each, 17 absmax -> 128 each.
  EXPECT_EQ(opt.state_bytes(b), 2 * 4160u + 2 * 128u);
  EXPECT_EQ(opt.state_bytes(e), 128u);
  // The totals count the m/v payload (no padding), owned and paged alike; resident: owned only.
  auto payload = [](StateFormat f, size_t n) { return f == StateFormat::F32 ? 8 * n : 2 * n + 8 * ((n + 255) / 256); };
  const size_t pa = payload(StateFormat::F32, 10), pb = payload(StateFormat::Q8, 4097),
               pc = payload(StateFormat::F32, 5000), pd = payload(StateFormat::Q8, 70000),
               pe = payload(StateFormat::F32, 1);
  EXPECT_EQ(opt.state_bytes(), pa + pb + pc + pd + pe);
  EXPECT_EQ(opt.resident_state_bytes(), pa + pd);
}

TEST(AdamWPagedState, AttachErrors) {
  AdamW opt;
  const int owned = opt.add_tensor("layers.0.w", 5000);
  const int paged = opt.add_tensor("layers.1.w", 5000, {.paged = true});
  AlignedBuffer<std::byte> buf(opt.state_bytes(paged) + 64);
  EXPECT_THROW(opt.attach_state(owned, buf.data()), Error);
  EXPECT_THROW(opt.detach_state(owned), Error);
  EXPECT_THROW(opt.attach_state(paged, nullptr), Error);
  try {
    opt.attach_state(paged, buf.data() + 16);
    ADD_FAILURE() << "misaligned storage accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.1.w"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("aligned"), std::string::npos) << e.what();
  }
  opt.attach_state(paged, buf.data() + 64);
  EXPECT_EQ(opt.q8_state(paged).m_code, reinterpret_cast<uint8_t*>(buf.data() + 64));
  opt.detach_state(paged);
}

class AdamWPagedStateDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(AdamWPagedStateDeathTest, SteppingPagedOutStateAborts) {
  AdamW opt;
  const int id = opt.add_tensor("layers.3.w", 5000, {.paged = true});
  std::vector<float> p(5000), g(5000, 1.f);
  EXPECT_DEATH(opt.step_tensor(id, p.data(), g.data(), nullptr, 1e-3f, 1.f, 1), "layers.3.w.*paged out");
}

// Tensors of both formats, registered paged or owned.
AdamW make_optimizer(bool paged) {
  AdamW opt;
  opt.add_tensor("layers.0.w", 4097, {.paged = paged});
  opt.add_tensor("layers.0.norm", 22);
  opt.add_tensor("embed", 5000, {.keep_fp32 = true, .paged = paged});
  return opt;
}

// Storage for every paged tensor of opt, attached.
std::vector<AlignedBuffer<std::byte>> attach_all(AdamW& opt) {
  std::vector<AlignedBuffer<std::byte>> s(opt.num_tensors());
  for (int id = 0; id < opt.num_tensors(); ++id)
    if (opt.is_paged(id)) {
      s[id].resize(opt.state_bytes(id));
      opt.attach_state(id, s[id].data());
    }
  return s;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(AdamWPagedState, SaveLoadUseTheAttachedStorage) {
  test::TempDir dir("adamw-paged");
  const std::string owned_path = dir.str() + "/owned.bin", paged_path = dir.str() + "/paged.bin";
  AdamW o = make_optimizer(false), p = make_optimizer(true);
  auto sp = attach_all(p);
  auto po = test::init_params(o), pp = po;
  test::train_all(o, po, 1, 3);
  test::train_all(p, pp, 1, 3);
  o.save(owned_path);
  p.save(paged_path);
  EXPECT_EQ(read_file(owned_path), read_file(paged_path)) << "paging changed the state file";

  // Paged out: save and load refuse, and save leaves no file behind.
  p.detach_state(2);
  EXPECT_THROW(p.save(dir.str() + "/none.bin"), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.str() + "/none.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir.str() + "/none.bin.tmp"));
  try {
    p.load(paged_path);
    ADD_FAILURE() << "load into paged-out state accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the state of embed is paged out"), std::string::npos) << e.what();
  }
  p.attach_state(2, sp[2].data());

  // Load into fresh storage (and from the owned optimizer's file): bitwise, and training on
  // continues bitwise.
  AdamW q = make_optimizer(true);
  auto sq = attach_all(q);
  q.load(owned_path);
  for (int id = 0; id < q.num_tensors(); ++id) {
    EXPECT_TRUE(region_of(q, id) == region_of(p, id)) << q.name(id);
    if (q.is_paged(id)) {
      EXPECT_EQ(std::memcmp(sq[id].data(), sp[id].data(), q.state_bytes(id)), 0) << q.name(id);
    }
  }
  auto pq = pp;
  test::train_all(p, pp, 4, 5);
  test::train_all(q, pq, 4, 5);
  for (int id = 0; id < q.num_tensors(); ++id) {
    EXPECT_TRUE(test::same_bits(pp[id], pq[id])) << q.name(id);
    EXPECT_TRUE(region_of(q, id) == region_of(p, id)) << q.name(id);
  }
}

TEST(AdamWPagedState, FailedLoadKeepsAttachedBytes) {
  test::TempDir dir("adamw-paged-bad");
  const std::string path = dir.str() + "/optim.bin";
  AdamW a = make_optimizer(true);
  auto sa = attach_all(a);
  auto pa = test::init_params(a);
  test::train_all(a, pa, 1, 2);
  a.save(path);
  const std::string bytes = read_file(path);

  AdamW b = make_optimizer(true);
  auto sb = attach_all(b);
  auto pb = test::init_params(b);
  test::train_all(b, pb, 1, 1);  // a state that differs from the file's
  std::vector<std::vector<std::byte>> before;
  for (int id = 0; id < b.num_tensors(); ++id) before.push_back(region_of(b, id));
  for (size_t cut : {size_t{40}, bytes.size() / 2, bytes.size() - 9}) {
    std::ofstream(path + ".cut", std::ios::binary).write(bytes.data(), cut);
    EXPECT_THROW(b.load(path + ".cut"), Error) << "cut at " << cut;
  }
  for (int id = 0; id < b.num_tensors(); ++id) EXPECT_TRUE(region_of(b, id) == before[id]) << b.name(id);
  // The complete file loads.
  b.load(path);
  for (int id = 0; id < b.num_tensors(); ++id) EXPECT_TRUE(region_of(b, id) == region_of(a, id)) << b.name(id);
}

// ---- Save and load through a pager ----

// A model-shaped optimizer: an owned embedding, `layers` layers of three consecutive tensors
// (Q8 weight, fp32 norm, fp32 keep_fp32 weight), paged or owned, and an owned 8-bit head.
AdamW make_layered(bool paged, int layers) {
  AdamWConfig cfg;
  cfg.num_threads = 2;
  AdamW opt(cfg);
  opt.add_tensor("embed", 5000, {.keep_fp32 = true});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    opt.add_tensor(p + "w", 4097 + 300 * l, {.paged = paged});
    opt.add_tensor(p + "norm", 22, {.weight_decay = 0.f, .paged = paged});
    opt.add_tensor(p + "w2", 3000, {.keep_fp32 = true, .paged = paged});
  }
  opt.add_tensor("head", 20000);
  return opt;
}

// Stands in for NVMe: one byte vector per group of consecutive paged tensors (the
// tensors' state regions back to back). A group is staged in one aligned buffer from its
// first id's page_in to its last id's page_out, and written back there if any of its
// tensors was modified; no more than one group is ever attached.
class GroupStore {
 public:
  enum class Mode { Copy, Garbage };  // what page_in stages: the stored bytes, or 0xa5 junk
  GroupStore(AdamW& opt, std::vector<std::vector<int>> groups) : opt_(opt), groups_(std::move(groups)) {
    group_of_.assign(opt.num_tensors(), -1);
    for (size_t g = 0; g < groups_.size(); ++g) {
      size_t bytes = 0;
      for (size_t k = 0; k < groups_[g].size(); ++k) {
        const int id = groups_[g][k];
        EXPECT_TRUE(opt.is_paged(id));
        if (k > 0) {
          EXPECT_EQ(id, groups_[g][k - 1] + 1) << "groups hold consecutive ids";
        }
        group_of_[id] = static_cast<int>(g);
        bytes += opt.state_bytes(id);
      }
      store_.emplace_back(bytes);  // zero: the fresh state
      largest_group_ = std::max(largest_group_, bytes);
    }
  }

  AdamWStatePager pager() {
    return {[this](int id) { page_in(id); }, [this](int id, bool modified) { page_out(id, modified); }};
  }
  void page_in(int id) {
    events_.push_back({id, 'i'});
    const int g = group_of_.at(id);
    ASSERT_GE(g, 0) << "page_in of an owned tensor " << id;
    if (staged_ >= 0) {  // already staged with its group: nothing to do
      ASSERT_EQ(staged_, g) << "a second group paged in while another is attached";
      return;
    }
    ASSERT_EQ(id, groups_[g].front()) << "a group paged in from the middle";
    staging_.resize(store_[g].size());
    if (mode_ == Mode::Copy)
      std::memcpy(staging_.data(), store_[g].data(), store_[g].size());
    else
      std::memset(staging_.data(), 0xa5, store_[g].size());
    size_t at = 0;
    for (int t : groups_[g]) {
      opt_.attach_state(t, staging_.data() + at);
      at += opt_.state_bytes(t);
    }
    staged_ = g;
    group_modified_ = false;
    peak_ = std::max(peak_, staging_.size());
  }
  void page_out(int id, bool modified) {
    events_.push_back({id, modified ? 'M' : 'o'});
    const int g = group_of_.at(id);
    ASSERT_EQ(staged_, g) << "page_out of a tensor that is not staged";
    if (modified) ++modified_calls_;
    group_modified_ = group_modified_ || modified;
    if (id != groups_[g].back()) return;
    if (group_modified_) std::memcpy(store_[g].data(), staging_.data(), store_[g].size());
    for (int t : groups_[g]) opt_.detach_state(t);
    std::memset(staging_.data(), 0xff, staging_.size());  // any later use of it shows
    staging_.resize(0);
    staged_ = -1;
  }

  // Steps every tensor through steps first..last like test::train_all, paging each group in
  // around its tensors' updates.
  void train(std::vector<std::vector<float>>& params, int64_t first, int64_t last) {
    for (int64_t step = first; step <= last; ++step)
      for (int id = 0; id < opt_.num_tensors(); ++id) {
        if (opt_.is_paged(id)) page_in(id);
        opt_.step_tensor(id, params[id].data(), test::spread_gradient(opt_.numel(id), 100 * step + id).data(), nullptr,
                         1e-3f, 1.f, step);
        if (opt_.is_paged(id)) page_out(id, true);
      }
    clear_events();
  }

  // Tensor id's state region as stored (a copy).
  std::vector<std::byte> region(int id) const {
    const int g = group_of_.at(id);
    size_t at = 0;
    for (int t : groups_[g]) {
      if (t == id) return {store_[g].begin() + at, store_[g].begin() + at + opt_.state_bytes(id)};
      at += opt_.state_bytes(t);
    }
    return {};
  }

  void set_mode(Mode m) { mode_ = m; }
  std::vector<std::vector<std::byte>>& store() { return store_; }
  const std::vector<std::pair<int, char>>& events() const { return events_; }
  void clear_events() {
    events_.clear();
    modified_calls_ = 0;
    peak_ = 0;
  }
  int modified_calls() const { return modified_calls_; }
  size_t peak() const { return peak_; }
  size_t largest_group() const { return largest_group_; }
  bool staged() const { return staged_ >= 0; }

 private:
  AdamW& opt_;
  std::vector<std::vector<int>> groups_;
  std::vector<int> group_of_;
  std::vector<std::vector<std::byte>> store_;
  AlignedBuffer<std::byte> staging_;
  int staged_ = -1;
  bool group_modified_ = false;
  Mode mode_ = Mode::Copy;
  std::vector<std::pair<int, char>> events_;
  int modified_calls_ = 0;
  size_t peak_ = 0, largest_group_ = 0;
};

// The paged ids of make_layered, grouped `per` consecutive tensors at a time.
std::vector<std::vector<int>> groups_of(const AdamW& opt, int per) {
  std::vector<std::vector<int>> g;
  for (int id = 0; id < opt.num_tensors(); ++id)
    if (opt.is_paged(id)) {
      if (g.empty() || static_cast<int>(g.back().size()) == per || g.back().back() != id - 1) g.emplace_back();
      g.back().push_back(id);
    }
  return g;
}

// The events save or load must produce: page_in(id), then page_out(id, modified), per
// paged id in order.
std::vector<std::pair<int, char>> expected_events(const AdamW& opt, char out) {
  std::vector<std::pair<int, char>> e;
  for (int id = 0; id < opt.num_tensors(); ++id)
    if (opt.is_paged(id)) {
      e.push_back({id, 'i'});
      e.push_back({id, out});
    }
  return e;
}

// Where tensor id's payload starts in its state file (the layout of adamw_state_file.cpp).
size_t payload_offset(const AdamW& opt, int id) {
  size_t at = 8 + 4 + 4 + 8;
  for (int t = 0;; ++t) {
    at += 4 + opt.name(t).size() + 8 + 1;
    if (t == id) return at;
    const size_t n = static_cast<size_t>(opt.numel(t)), nb = (n + 255) / 256;
    at += opt.format(t) == StateFormat::F32 ? 8 * n : 2 * n + 8 * nb;
  }
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Groups of 3 (a layer), 2 (straddling layers) and 1 (one tensor at a time).
TEST(AdamWPagedState, PagerSaveLoadMatchOwnedBitwise) {
  for (int per : {3, 2, 1}) {
    SCOPED_TRACE("groups of " + std::to_string(per));
    test::TempDir dir("adamw-pager");
    const std::string owned_path = dir.str() + "/owned.bin", paged_path = dir.str() + "/paged.bin";
    const int layers = 3;
    AdamW o = make_layered(false, layers), p = make_layered(true, layers);
    GroupStore sp(p, groups_of(p, per));
    auto po = test::init_params(o), pp = po;
    test::train_all(o, po, 1, 3);
    sp.train(pp, 1, 3);
    for (int id = 0; id < p.num_tensors(); ++id) {
      ASSERT_TRUE(test::same_bits(po[id], pp[id])) << p.name(id);
      if (p.is_paged(id)) {
        ASSERT_TRUE(sp.region(id) == region_of(o, id)) << p.name(id);
      }
    }

    // Save: the owned optimizer's file byte for byte, one group staged at a time.
    o.save(owned_path);
    EXPECT_THROW(p.save(paged_path), Error) << "the plain save needs every state attached";
    p.save(paged_path, sp.pager());
    EXPECT_EQ(read_file(paged_path), read_file(owned_path)) << "the pager changed the state file";
    EXPECT_FALSE(std::filesystem::exists(paged_path + ".tmp"));
    EXPECT_EQ(sp.events(), expected_events(p, 'o'));
    EXPECT_EQ(sp.modified_calls(), 0);
    EXPECT_FALSE(sp.staged());
    EXPECT_GT(sp.peak(), 0u);
    EXPECT_LE(sp.peak(), sp.largest_group());
    EXPECT_LT(sp.largest_group(), p.state_bytes() - p.resident_state_bytes()) << "the test stages everything at once";

    // Load into a fresh optimizer and store, through staging full of junk: the store then
    // holds exactly the owned optimizer's states (zero padding included), and so do the
    // owned tensors.
    AdamW q = make_layered(true, layers);
    GroupStore sq(q, groups_of(q, per));
    sq.set_mode(GroupStore::Mode::Garbage);
    q.load(owned_path, sq.pager());
    sq.set_mode(GroupStore::Mode::Copy);
    EXPECT_EQ(sq.events(), expected_events(q, 'M'));
    EXPECT_FALSE(sq.staged());
    EXPECT_LE(sq.peak(), sq.largest_group());
    for (int id = 0; id < q.num_tensors(); ++id)
      EXPECT_TRUE((q.is_paged(id) ? sq.region(id) : region_of(q, id)) == region_of(o, id)) << q.name(id);
    // Two more steps: bitwise the owned optimizer's.
    auto pq = po;
    test::train_all(o, po, 4, 5);
    sq.train(pq, 4, 5);
    for (int id = 0; id < q.num_tensors(); ++id) {
      EXPECT_TRUE(test::same_bits(po[id], pq[id])) << q.name(id);
      EXPECT_TRUE((q.is_paged(id) ? sq.region(id) : region_of(q, id)) == region_of(o, id)) << q.name(id);
    }
    if (HasFailure()) return;
  }
}

TEST(AdamWPagedState, PagerLoadOfABadFileChangesNothing) {
  test::TempDir dir("adamw-pager-bad");
  const std::string path = dir.str() + "/optim.bin", bad = dir.str() + "/bad.bin";
  const int layers = 2;
  AdamW a = make_layered(true, layers);
  GroupStore sa(a, groups_of(a, 3));
  auto pa = test::init_params(a);
  sa.train(pa, 1, 2);
  a.save(path, sa.pager());
  const std::string bytes = read_file(path);

  AdamW b = make_layered(true, layers);
  GroupStore sb(b, groups_of(b, 3));
  auto pb = test::init_params(b);
  sb.train(pb, 1, 1);  // a state that differs from the file's
  const std::vector<std::vector<std::byte>> store_before = sb.store();
  std::vector<std::vector<std::byte>> owned_before(b.num_tensors());
  for (int id = 0; id < b.num_tensors(); ++id)
    if (!b.is_paged(id)) owned_before[id] = region_of(b, id);
  auto unchanged = [&](const std::string& what) {
    EXPECT_TRUE(sb.events().empty()) << what << ": the pager was called for a bad file";
    EXPECT_EQ(sb.modified_calls(), 0) << what;
    EXPECT_FALSE(sb.staged()) << what;
    EXPECT_TRUE(sb.store() == store_before) << what << ": the store changed";
    for (int id = 0; id < b.num_tensors(); ++id)
      if (!b.is_paged(id)) {
        EXPECT_TRUE(region_of(b, id) == owned_before[id]) << what << ": " << b.name(id);
      }
    sb.clear_events();
  };
  auto expect_bad = [&](const std::string& file, const std::string& what) {
    write_file(bad, file);
    EXPECT_THROW(b.load(bad, sb.pager()), Error) << what;
    unchanged(what);
  };

  // Truncated: in the header, in a tensor header, in each tensor's payload, in the trailer.
  const int w1 = 4, head = b.num_tensors() - 1;  // layers.1.w (paged), head (owned)
  ASSERT_TRUE(b.is_paged(w1));
  ASSERT_FALSE(b.is_paged(head));
  std::vector<size_t> cuts = {5, 30, bytes.size() - 9, bytes.size() - 1};
  for (int id = 0; id < b.num_tensors(); ++id) cuts.push_back(payload_offset(b, id) + 7);
  for (size_t cut : cuts) expect_bad(bytes.substr(0, cut), "cut at " + std::to_string(cut));
  // One flipped byte: in a paged tensor's payload, in owned ones (first and last tensor),
  // in a name, in the hash.
  for (auto [at, what] : {std::pair{payload_offset(b, w1) + 100, "paged payload"},
                          std::pair{payload_offset(b, 0) + 3, "owned payload (embed)"},
                          std::pair{payload_offset(b, head) + 19999, "owned payload (head)"},
                          std::pair{payload_offset(b, 2) - 10, "a name"},
                          std::pair{bytes.size() - 12, "the hash"}}) {
    std::string flipped = bytes;
    flipped[at] ^= 0x10;
    expect_bad(flipped, what);
  }
  expect_bad(bytes + "x", "trailing bytes");
  EXPECT_THROW(b.load(dir.str() + "/missing.bin", sb.pager()), Error);
  unchanged("missing file");
  // A file saved by another optimizer shape.
  AdamW other = make_layered(false, layers + 1);
  other.save(dir.str() + "/other.bin");
  EXPECT_THROW(b.load(dir.str() + "/other.bin", sb.pager()), Error);
  unchanged("other tensors");

  // The complete file loads.
  b.load(path, sb.pager());
  for (int id = 0; id < b.num_tensors(); ++id)
    EXPECT_TRUE((b.is_paged(id) ? sb.region(id) : region_of(b, id)) ==
                (a.is_paged(id) ? sa.region(id) : region_of(a, id)))
        << b.name(id);
}

TEST(AdamWPagedState, PagerErrors) {
  test::TempDir dir("adamw-pager-errors");
  const std::string path = dir.str() + "/optim.bin";
  AdamW a = make_layered(true, 2);
  GroupStore sa(a, groups_of(a, 3));
  a.save(path, sa.pager());

  // A pager without both functions.
  EXPECT_THROW(a.save(dir.str() + "/x.bin", {}), Error);
  EXPECT_THROW(a.load(path, {sa.pager().page_in, nullptr}), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.str() + "/x.bin"));
  // A page_in that attaches nothing.
  const AdamWStatePager lazy{[](int) {}, [](int, bool) {}};
  try {
    a.save(dir.str() + "/x.bin", lazy);
    ADD_FAILURE() << "save through a page_in that attaches nothing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("left the state of layers.0.w paged out"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.load(path, lazy), Error);
  // A failed save leaves no file behind, not even the .tmp; the pager's exception
  // propagates as it is.
  struct DiskGone {};
  const AdamWStatePager failing{[&](int id) {
                                  if (id == 4) throw DiskGone{};
                                  sa.page_in(id);
                                },
                                [&](int id, bool m) { sa.page_out(id, m); }};
  EXPECT_THROW(a.save(dir.str() + "/x.bin", failing), DiskGone);
  EXPECT_FALSE(std::filesystem::exists(dir.str() + "/x.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir.str() + "/x.bin.tmp"));
  EXPECT_FALSE(sa.staged());  // the group of ids 1-3 was done; 4 never staged

  // Without paged tensors a pager is not needed and never called.
  AdamW o = make_layered(false, 1);
  o.save(dir.str() + "/owned.bin", {});
  o.load(dir.str() + "/owned.bin", {});
  EXPECT_EQ(read_file(dir.str() + "/owned.bin"), [&] {
    o.save(dir.str() + "/plain.bin");
    return read_file(dir.str() + "/plain.bin");
  }());
}

// The file rewritten in place between load's two passes (here: from inside the second
// pass): load says so instead of loading a state that never checked out.
TEST(AdamWPagedState, PagerLoadNoticesAFileChangedBetweenPasses) {
  test::TempDir dir("adamw-pager-race");
  const std::string path = dir.str() + "/optim.bin";
  AdamW a = make_layered(true, 2);
  GroupStore sa(a, groups_of(a, 3));
  auto pa = test::init_params(a);
  sa.train(pa, 1, 2);
  a.save(path, sa.pager());

  AdamW b = make_layered(true, 2);
  GroupStore sb(b, groups_of(b, 3));
  const size_t at = payload_offset(b, b.num_tensors() - 1) + 19000;  // deep in the head, past stdio's buffer
  bool rewritten = false;
  const AdamWStatePager racing{[&](int id) {
                                 if (!rewritten) {
                                   std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
                                   f.seekg(static_cast<std::streamoff>(at));
                                   char c = 0;
                                   f.read(&c, 1);
                                   c ^= 0x10;
                                   f.seekp(static_cast<std::streamoff>(at));
                                   f.write(&c, 1);
                                   rewritten = true;
                                 }
                                 sb.page_in(id);
                               },
                               [&](int id, bool m) { sb.page_out(id, m); }};
  try {
    b.load(path, racing);
    ADD_FAILURE() << "a file that changed between the passes loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("changed while it was being loaded"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(rewritten);
}

}  // namespace
}  // namespace lt
