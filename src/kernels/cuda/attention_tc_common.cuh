// What the tensor-core attention's kernels share (attention_tc_cuda.h has the contract):
// the shape, the tiles and their staging, the fragment loads. In headers so that
// tests/kernels/warp_emulator.h can run the kernels on the CPU as well: there every CUDA
// thread is a fiber, and mma_bf16, the warp shuffles and the block barrier are
// emulated with the PTX ISA's fragment layouts (LT_WARP_EMULATION). Nothing here may use
// CUDA beyond __device__ / __global__ functions, threadIdx / blockIdx, __syncthreads,
// __shfl_xor_sync, mma_bf16, ldmatrix_x4(_trans), LT_DYNAMIC_SMEM, the asynchronous copies
// (cp_async_*) and the two vector accesses below (all of which have emulated twins).
#pragma once

#include <cmath>
#include <cstdint>
#ifdef LT_WARP_EMULATION
#include <cstdio>
#include <cstdlib>
#include <cstring>
#endif

#include "kernels/cuda/bf16.cuh"
#ifndef LT_WARP_EMULATION
#include "kernels/cuda/mma_bf16.cuh"
#define LT_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// lt::cuda::tc. Emulated, in an inline namespace more: the kernels' host stubs in the
// CUDA library and their emulated twins in a test binary that links it would otherwise
// share mangled names, and the linker would keep whichever came first.
#ifdef LT_WARP_EMULATION
#define LT_TC_NAMESPACE_BEGIN \
  namespace lt::cuda::tc {    \
  inline namespace emulated {
#define LT_TC_NAMESPACE_END \
  }                         \
  }
#else
#define LT_TC_NAMESPACE_BEGIN namespace lt::cuda::tc {
#define LT_TC_NAMESPACE_END }
#endif

LT_TC_NAMESPACE_BEGIN

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockRows = 16 * kWarps;  // query rows per block, 16 per warp (one mma's M)
constexpr int kKeyTile = 64;             // keys per shared-memory tile: 8 mma N-tiles of 8

// rows: S rounded up to the key tile, the rows of each head in the packed operands
// (pack_kernel below).
struct TcShape {
  int64_t B, S, Hq, Hkv, D;
  float scale;
  const int32_t* doc_start;
  int64_t window;
  int64_t rows;
};

// Host side: the head dim the kernels are instantiated for (D padded with zeros), and the
// shape with its packed rows.
inline int padded_head_dim(int64_t D) { return D <= 64 ? 64 : D <= 128 ? 128 : 256; }
inline TcShape tc_shape(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                        const int32_t* doc_start, int64_t window) {
  return TcShape{B, S, Hq, Hkv, D, scale, doc_start, window, (S + kKeyTile - 1) / kKeyTile * kKeyTile};
}

// The launches' grids (x, y, z), host side, for attention_tc_cuda.cu and the warp
// emulator's tests alike: a block per 64 query rows (the forward, the row deltas, dq) or
// per 64 keys (dk/dv, and the packing of an operand: a block per key tile of packed rows)
// of each of `heads` (heads, or heads x column chunks) in each batch row.
struct TcGrid {
  unsigned x, y, z;
};
inline TcGrid query_block_grid(const TcShape& s, int64_t heads) {
  return {static_cast<unsigned>((s.S + kBlockRows - 1) / kBlockRows), static_cast<unsigned>(heads),
          static_cast<unsigned>(s.B)};
}
inline TcGrid key_block_grid(const TcShape& s, int64_t heads) {
  return {static_cast<unsigned>((s.S + kKeyTile - 1) / kKeyTile), static_cast<unsigned>(heads),
          static_cast<unsigned>(s.B)};
}

// The kernels read q, k, v (and dO) packed: bf16 bits, [B][H][rows][DP], zero past S and
// D, converted once by pack_kernel (one launch for all of them) before the attention's
// kernels run, instead of converted from fp32 every time a block stages a tile (a key tile
// is staged by every query block and head that sees it). Staging is then a copy of 16-byte pieces (a tile row
// of DP bf16 is 128-512 bytes), reading half the bytes. The workspace holds them in this
// order (byte offsets, each a multiple of 256); the backward also holds dO and, first,
// each query row's delta (B x S x Hq floats).
struct PackedOperands {
  size_t deltas, q, k, v, dout, bytes;
  static uint16_t* at(void* workspace, size_t offset) {
    return reinterpret_cast<uint16_t*>(static_cast<unsigned char*>(workspace) + offset);
  }
};
inline size_t round_up_256(size_t n) { return (n + 255) / 256 * 256; }
inline PackedOperands packed_operands(const TcShape& s, bool backward) {
  const size_t head = static_cast<size_t>(s.rows * padded_head_dim(s.D)) * sizeof(uint16_t);
  const size_t q = static_cast<size_t>(s.B * s.Hq) * head, kv = static_cast<size_t>(s.B * s.Hkv) * head;
  PackedOperands p{};
  p.q = backward ? round_up_256(static_cast<size_t>(s.B * s.S * s.Hq) * sizeof(float)) : 0;
  p.k = p.q + q;
  p.v = p.k + kv;
  p.dout = p.v + kv;
  p.bytes = p.dout + (backward ? q : 0);
  return p;
}

__device__ inline int64_t first_visible_key(const TcShape& s, int64_t b, int64_t i) {
  int64_t j0 = s.doc_start ? s.doc_start[b * s.S + i] : 0;
  if (s.window > 0 && i - s.window + 1 > j0) j0 = i - s.window + 1;
  return j0;
}

// A thread's two query rows of a block's 64 (rows g and g + 8 of its warp's 16: x = 0, 1),
// the first key each sees, and the key tiles some row of the block sees.
struct QueryRows {
  int64_t row[2], first[2];
  int64_t tile_first, tile_last;
  __device__ bool sees(int x, int64_t j) const { return j >= first[x] && j <= row[x]; }
};
__device__ inline QueryRows query_rows(const TcShape& s, int64_t b, int64_t q0) {
  QueryRows r;
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
  for (int x = 0; x < 2; ++x) {
    r.row[x] = q0 + warp * 16 + g + 8 * x;
    r.first[x] = r.row[x] < s.S ? first_visible_key(s, b, r.row[x]) : r.row[x] + 1;  // past S: sees no key
  }
  // first_visible_key never decreases along a row (documents run in order, the window
  // slides), so q0's is the block's smallest.
  const int64_t last_row = (q0 + kBlockRows < s.S ? q0 + kBlockRows : s.S) - 1;
  r.tile_first = first_visible_key(s, b, q0) / kKeyTile;
  r.tile_last = last_row / kKeyTile;
  return r;
}

// The column of a 16 x 64 product (tile_product's layout) that a thread's element e of
// accumulator tile nt holds: 8 nt + 2t + (e & 1); its row is g + 8 (e >> 1).
__device__ inline int accumulator_column(int nt, int e) { return nt * 8 + 2 * (threadIdx.x & 3) + (e & 1); }

// Shared-memory tiles are bf16 (as raw bits), [64 rows][DP], each row 8 elements (4 words)
// longer than it holds, so that the 32 words a warp's fragment load reads (8 rows x 4
// consecutive words) fall in 32 different banks.
template <int kCols>
inline constexpr int kTileWords = (kCols + 8) / 2;  // one row's stride, in 32-bit words
template <int kCols>
constexpr size_t tile_bytes(int rows) {
  return static_cast<size_t>(rows) * kTileWords<kCols> * 4;
}

__device__ inline uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(f32_to_bf16_bits(lo)) | (static_cast<uint32_t>(f32_to_bf16_bits(hi)) << 16);
}

// Four floats from 16-byte-aligned global memory and four words to 16-byte-aligned memory:
// one vector access each on the GPU; under the emulator byte copies, after checking the
// alignment that the GPU would fault on.
#ifdef LT_WARP_EMULATION
inline void require_aligned(const void* p, uintptr_t bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % bytes == 0) return;
  std::fprintf(stderr, "warp emulator: %s at %p is not %zu-byte aligned\n", what, p, static_cast<size_t>(bytes));
  std::abort();
}
inline void load_float4(float (&v)[4], const float* p) {
  require_aligned(p, 16, "a float4 load");
  std::memcpy(v, p, 16);
}
inline void store_words4(void* p, const uint32_t (&w)[4]) {
  require_aligned(p, 16, "a uint4 store");
  std::memcpy(p, w, 16);
}
#else
__device__ inline void load_float4(float (&v)[4], const float* p) {
  const float4 f = *reinterpret_cast<const float4*>(p);
  v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
}
__device__ inline void store_words4(void* p, const uint32_t (&w)[4]) {
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}
// 16 bytes from global to shared memory without passing through registers, landing when
// the thread waits for their group (sm_80 and later; the emulator has its twins).
__device__ inline void cp_async_16(void* to, const void* from) {
  const unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(from) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>  // wait until at most kPending of the thread's committed groups are in flight
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
#endif

// Every thread's staged tiles have landed and every thread has waited for them: after this
// the block may read what it staged.
__device__ inline void wait_for_staged_tiles() {
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
}
// The same for all but each thread's newest committed group, which may still be in flight:
// where a kernel stages its next tile while it computes with this one.
__device__ inline void wait_for_staged_tiles_but_the_newest() {
  cp_async_wait<1>();
  __syncthreads();
}

__device__ inline float round_to_bf16(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }

// What one launch of pack_kernel packs: q, k, v and, for the backward, dO, each x
// ([B*S, heads, D] fp32) into its place `to` in the workspace; with dO also each query
// row's delta = sum_d bf16(dO) o, which both backward kernels read (dk/dv would otherwise
// recompute a query tile's deltas in every key block that sees it), from o ([B*S, Hq, D])
// read beside dO, into deltas ([B][Hq][S]). Block row y of the grid packs head y of the
// operands' heads counted in turn.
struct PackJob {
  static constexpr int kQ = 0, kK = 1, kV = 2, kDout = 3, kMaxOperands = 4;  // the operands, in turn
  const float* x[kMaxOperands];
  uint16_t* to[kMaxOperands];
  int64_t heads[kMaxOperands];
  int operands;  // 3 (the forward) or 4 (the backward, with dO)
  const float* o;
  float* deltas;
  int64_t total_heads() const {
    int64_t n = 0;
    for (int i = 0; i < operands; ++i) n += heads[i];
    return n;
  }
};
// Host side, for the launcher and the emulated tests alike: the forward's job (dout null)
// or the backward's, into `workspace` laid out as packed_operands(s, dout != nullptr).
inline PackJob pack_job(void* workspace, const TcShape& s, const float* q, const float* k, const float* v,
                        const float* dout = nullptr, const float* o = nullptr) {
  const PackedOperands p = packed_operands(s, dout != nullptr);
  PackJob job{{q, k, v, dout},
              {PackedOperands::at(workspace, p.q), PackedOperands::at(workspace, p.k),
               PackedOperands::at(workspace, p.v), dout ? PackedOperands::at(workspace, p.dout) : nullptr},
              {s.Hq, s.Hkv, s.Hkv, s.Hq},
              dout ? 4 : 3,
              o,
              dout ? reinterpret_cast<float*>(PackedOperands::at(workspace, p.deltas)) : nullptr};
  return job;
}

// Eight values of a row from column c on (fewer where the row ends before c + 8; v zeroed
// by the caller): two 16-byte loads where `vector` (D a multiple of 4 and the rows 16-byte
// aligned: then c < D and both multiples of 4 put the first four in the row, and the next
// four too or none), else scalar loads.
__device__ inline void load_octet(float (&v)[8], const float* src, int c, int64_t D, bool vector) {
  if (vector) {
    load_float4(*reinterpret_cast<float(*)[4]>(v), src);
    if (c + 4 < D) load_float4(*reinterpret_cast<float(*)[4]>(v + 4), src + 4);
  } else {
    for (int j = 0; j < 8 && c + j < D; ++j) v[j] = src[j];
  }
}

// Packs the job's operands (PackedOperands' layout) as bf16, nearest even. Grid: rows / 64
// blocks of 64 packed rows, job.total_heads(), B. A thread converts 8 columns of a row at
// a time, one 16-byte store; the DP / 8 threads of a row are adjacent lanes of one warp, so
// dO's deltas are their 8-column partial sums added by a shuffle tree.
template <int DP>
__global__ void __launch_bounds__(kThreads) pack_kernel(PackJob job, TcShape s) {
  constexpr int kOctets = DP / 8;
  static_assert(32 % kOctets == 0 && (kKeyTile * kOctets) % kThreads == 0,
                "a row's threads share a warp, and every thread takes as many rows");
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kKeyTile, b = blockIdx.z;
  // Block row y's operand n and head h, by constant indices only (indexing the parameters
  // by n would copy them to the stack, ptxas: a 120-byte frame).
  int n = 0;
  int64_t h = blockIdx.y, H = job.heads[0];
  const float* x = job.x[0];
  uint16_t* to = job.to[0];
#pragma unroll
  for (int next = 1; next < PackJob::kMaxOperands; ++next)
    if (n == next - 1 && h >= H) {
      h -= H;
      n = next, H = job.heads[next], x = job.x[next], to = job.to[next];
    }
  const bool dout = n == PackJob::kDout;  // the same for the whole block
  const bool vector = s.D % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const bool vector_o = s.D % 4 == 0 && reinterpret_cast<uintptr_t>(job.o) % 16 == 0;
  for (int e = threadIdx.x; e < kKeyTile * kOctets; e += kThreads) {
    const int r = e / kOctets, c = e % kOctets * 8;
    const int64_t i = row0 + r;
    const bool in_row = i < s.S && c < s.D;
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    const int64_t at = ((b * s.S + i) * H + h) * s.D + c;
    if (in_row) load_octet(v, x + at, c, s.D, vector);
    const uint32_t w[4] = {pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]),
                           pack_bf16(v[6], v[7])};
    store_words4(to + ((b * H + h) * s.rows + i) * DP + c, w);
    if (dout) {
      float ov[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      if (in_row) load_octet(ov, job.o + at, c, s.D, vector_o);
      float delta = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) delta = fmaf(round_to_bf16(v[j]), ov[j], delta);
#pragma unroll
      for (int m = kOctets / 2; m >= 1; m >>= 1) delta += __shfl_xor_sync(0xffffffffu, delta, m);
      if (c == 0 && i < s.S) job.deltas[(b * s.Hq + h) * s.S + i] = delta;
    }
  }
}

// Rows row0 .. row0 + 63 of head h of a packed operand (H heads), columns col0 .. col0 +
// kCols - 1, into a row-major shared-memory tile [64][kTileWords<kCols>]: asynchronous
// copies of 16-byte pieces (a tile row is a multiple of 16 bytes, and so are col0 and the
// packed rows), a thread's pieces kThreads / (kCols / 8) rows apart; they land by
// wait_for_staged_tiles. No registers hold the data on its way, so a thread has all its
// pieces in flight at once.
template <int kCols, int DP>
__device__ void stage_tile(uint32_t* tile, const uint16_t* packed, int64_t b, int64_t row0, int64_t H, int64_t h,
                           int col0, const TcShape& s) {
  constexpr int kOctets = kCols / 8, kRowsAStep = kThreads / kOctets;
  static_assert(kThreads % kOctets == 0, "a step of the block covers whole rows");
  // One base each, then constant offsets: the unrolled copies need no address registers of
  // their own (computing each copy's address costs dk/dv at D 256 spills, ptxas sm_90).
  const int r = threadIdx.x / kOctets, c = threadIdx.x % kOctets * 8;
  const uint16_t* from = packed + ((b * H + h) * s.rows + row0 + r) * DP + col0 + c;
  uint32_t* to = tile + r * kTileWords<kCols> + c / 2;
#pragma unroll
  for (int step = 0; step < kKeyTile / kRowsAStep; ++step)
    cp_async_16(to + step * kRowsAStep * kTileWords<kCols>, from + step * kRowsAStep * DP);
}

// Where a kernel stages its next tile while it computes with this one: once every warp has
// read the tile (the barrier), the next one's copies go into its place, as a group of their
// own; after the last tile an empty group, so that every iteration commits as many groups
// and the waits count the same (more is the same for the whole block).
template <int kCols, int DP>
__device__ void stage_next_tile(bool more, uint32_t* tile, const uint16_t* packed, int64_t b, int64_t row0,
                                int64_t H, int64_t h, int col0, const TcShape& s) {
  if (more) {
    __syncthreads();
    stage_tile<kCols, DP>(tile, packed, b, row0, H, h, col0, s);
  }
  cp_async_commit();
}

// Fragments from the row-major shared-memory tiles (stride: a row, in words), a warp-wide
// ldmatrix each (mma_bf16.cuh: lane l gives row l % 8 of matrix l / 8):
//  - load_a: the A fragment of rows row0 .. + 15, columns 16 kk .. + 15 (matrices: rows
//    0-7 and 8-15 at columns 0-7, then at columns 8-15);
//  - load_b_pair: the B fragments (b0, b1 of each) of two products whose B is a tile
//    stored [n][k] (the score products: k^T, q^T, v^T, dO^T read as stored): n = n0 .. + 7
//    and n0 + 8 .. + 15, k = 16 kk .. + 15;
//  - load_b_pair_from_rows: the same where the tile is stored [k][n] (the products summing
//    over keys or queries: P v, dS k, P^T dO, dS^T q), transposed on the way, so they read
//    the row-major tiles that the score products read instead of transposed copies that
//    would cost a second staging and, at D 128, more shared memory than consumer GPUs give a
//    block (99 KB).
// A row stride of 4 mod 32 words puts a matrix's 8 rows of 16 bytes in 32 different banks.
__device__ inline void load_a(uint32_t (&a)[4], const uint32_t* tile, int stride, int row0, int kk) {
  const int lane = threadIdx.x & 31;
  ldmatrix_x4(a, tile + (row0 + (lane & 15)) * stride + kk * 8 + (lane >> 4) * 4);
}
__device__ inline void load_b_pair(uint32_t (&b)[4], const uint32_t* tile, int stride, int n0, int kk) {
  const int lane = threadIdx.x & 31;
  ldmatrix_x4(b, tile + (n0 + (lane >> 4) * 8 + (lane & 7)) * stride + kk * 8 + ((lane >> 3) & 1) * 4);
}
__device__ inline void load_b_pair_from_rows(uint32_t (&b)[4], const uint32_t* tile, int stride, int n0, int kk) {
  const int lane = threadIdx.x & 31;
  ldmatrix_x4_trans(b, tile + (kk * 16 + (lane & 15)) * stride + (n0 + (lane >> 4) * 8) / 2);
}
// Two accumulator tiles side by side (columns 16 kc .. 16 kc + 15 of a 16-row product) as
// the A fragment of the next product, rounded to bf16: the accumulator's layout puts each
// thread's values where the A fragment wants them.
__device__ inline void accumulators_as_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// x += a_rows . b_rows^T for the warp's 16 rows row0 .. row0 + 15 of a_tile against the 64
// rows of b_tile (both row-major [64][kCols]): 8 accumulator tiles of 8 columns, summed
// over the columns in order, 16 at a time.
template <int kCols>
__device__ inline void add_tile_product(float (&x)[8][4], const uint32_t* a_tile, const uint32_t* b_tile, int row0) {
#pragma unroll
  for (int kk = 0; kk < kCols / 16; ++kk) {
    uint32_t a[4];
    load_a(a, a_tile, kTileWords<kCols>, row0, kk);
#pragma unroll
    for (int nt = 0; nt < 8; nt += 2) {
      uint32_t b[4];
      load_b_pair(b, b_tile, kTileWords<kCols>, nt * 8, kk);
      mma_bf16(x[nt], a, b[0], b[1]);
      mma_bf16(x[nt + 1], a, b[2], b[3]);
    }
  }
}
__device__ inline void zero_tiles(float (&x)[8][4]) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) x[nt][0] = x[nt][1] = x[nt][2] = x[nt][3] = 0.f;
}
template <int DP>
__device__ inline void tile_product(float (&x)[8][4], const uint32_t* a_tile, const uint32_t* b_tile, int row0) {
  zero_tiles(x);
  add_tile_product<DP>(x, a_tile, b_tile, row0);
}

// acc += bf16(x) . b for a 16 x 64 product x (tile_product's layout; its 64 columns are
// the sum's index) and columns col0 .. col0 + 8 kTiles - 1 of a row-major tile b
// [64][kTileWords<DP>]: 16 of the sum at a time, x's tiles 2kc and 2kc + 1 the A fragment
// (accumulators_as_a).
template <int DP, int kTiles>
__device__ inline void accumulate_product(float (&acc)[kTiles][4], const float (&x)[8][4], const uint32_t* b_tile,
                                          int col0) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    uint32_t a[4];
    accumulators_as_a(a, x[2 * kc], x[2 * kc + 1]);
    static_assert(kTiles % 2 == 0, "column tiles go in pairs");
#pragma unroll
    for (int ct = 0; ct < kTiles; ct += 2) {
      uint32_t b[4];
      load_b_pair_from_rows(b, b_tile, kTileWords<DP>, col0 + ct * 8, kc);
      mma_bf16(acc[ct], a, b[0], b[1]);
      mma_bf16(acc[ct + 1], a, b[2], b[3]);
    }
  }
}

LT_TC_NAMESPACE_END
