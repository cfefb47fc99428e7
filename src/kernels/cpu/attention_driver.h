// Causal GQA attention on CPU: the tiling and threading driver, written once as templates
// over a level's micro-kernels (the `Micro` contract in attention_tiles.h). Include it
// after core/isa_target.h, so that each level's file compiles it for that level in
// namespace lt::LT_ISA_NS.
//
// Threads (OpenMP, the count in force; never fixed here):
//   forward: items (batch, kv head, query tile), all heads of the group inside one item
//            so the packed K tile is shared; heaviest query tiles first, dynamic schedule.
//   backward: dk/dv of one key tile are owned by one item, so GQA heads never race.
//     fused: items (batch, kv head); key tiles in order, dq += dS*K accumulated in place.
//     split: items (batch, kv head, key tile) for dk/dv, then (batch, kv head, query tile)
//            for dq, recomputing P and dS (7 tile products instead of 5).
//   Fused is used when the (batch, kv head) items balance over the threads; otherwise
//   split.
// Summation order, the same whatever the thread count or schedule:
//   o, lse of a query tile: key tiles 0, 1, ..., qt in order, one online-softmax update
//     each; within a tile, the micro-kernels' own fixed order.
//   dk, dv of a key tile: heads of the group in order, then query tiles kt, kt + 1, ...
//   dq of a query tile: key tiles 0, 1, ..., qt in order, each adding its heads' dS*K;
//     fused and split make the same calls with the same arguments in the same order.
//   delta = dO . O per row: one fixed-order vector dot.
// So results are bitwise identical for any thread count within one level. Backward
// overwrites dq, dk, dv.
// Documents (doc_start): a query tile visits key tiles first_key_tile(qt) .. qt, a key
// tile query tiles kt .. last_query_tile(kt): the same (query tile, key tile) pairs in
// both, and each pair works on the rows_seeing prefix of the query tile's rows, so the
// orders above hold with the masked pairs and rows left out. A sliding window is folded
// into those starts first (attention_tiles.h KeyStarts), so it takes the same paths.
#if !defined(LT_ISA_NS)
#error "include core/isa_target.h (after kernels/cpu/attention_tiles.h) before this file"
#endif

namespace lt::LT_ISA_NS::attention_driver {

using namespace ::lt::attention_tiles;

// K^T, V^T and the rows of K of key tile (b, hk, kt) into w.kt, w.vt, w.kr.
template <class Micro>
void pack_kv(const Shape& sh, Scratch& w, const BwdArgs& a, int64_t b, int64_t hk, int64_t kt) {
  const int64_t j0 = kt * kTile, cols = std::min(kTile, sh.S - j0);
  const int64_t off = (b * sh.S + j0) * sh.ldk + hk * sh.D;
  Micro::pack_transposed(w.kt.data(), a.k + off, sh.ldk, cols, sh.D);
  Micro::pack_transposed(w.vt.data(), a.v + off, sh.ldk, cols, sh.D);
  pack_rows(w.kr.data(), a.k + off, sh.ldk, cols, sh.D);
}

// Forward for (b, kv head hk, query tile qt), all heads of the group.
template <class Micro>
void forward_item(const Shape& sh, Scratch& w, float* o, float* lse, const float* q, const float* k,
                  const float* v, int64_t b, int64_t hk, int64_t qt, float scale) {
  const int64_t D = sh.D, S = sh.S, G = sh.group;
  const int64_t i0 = qt * kTile, rows = std::min(kTile, S - i0);
  const float c2 = scale * kLog2e;
  const Docs docs(sh, b);
  std::fill(w.acc.data(), w.acc.data() + G * kTile * D, 0.0f);
  std::fill(w.m.data(), w.m.data() + G * kTile, kNegInf);
  std::fill(w.l.data(), w.l.data() + G * kTile, 0.0f);
  for (int64_t kt = docs.first_key_tile(qt); kt <= qt; ++kt) {
    const int64_t j0 = kt * kTile, cols = std::min(kTile, S - j0);
    const bool diag = kt == qt;
    const int64_t live_rows = docs.rows_seeing(i0, rows, j0 + cols);
    const int64_t off = (b * S + j0) * sh.ldk + hk * D;
    Micro::pack_transposed(w.kt.data(), k + off, sh.ldk, cols, D);
    pack_rows(w.vr.data(), v + off, sh.ldk, cols, D);
    if (!diag) {  // the next key tile, while this one computes
      const int64_t next = std::min(kTile, S - j0 - kTile);
      prefetch_rows(k + off + kTile * sh.ldk, sh.ldk, next, D);
      prefetch_rows(v + off + kTile * sh.ldk, sh.ldk, next, D);
    }
    for (int64_t g = 0; g < G; ++g) {
      const int64_t h = hk * G + g;
      float* acc = w.acc.data() + g * kTile * D;
      float* m = w.m.data() + g * kTile;
      float* l = w.l.data() + g * kTile;
      Micro::nt(w.s.data(), q + (b * S + i0) * sh.ldq + h * D, sh.ldq, w.kt.data(), live_rows, D,
                diag);
      for (int64_t r = 0; r < live_rows; ++r) {
        // On the diagonal tile (j0 == i0) row r sees keys 0..r of it.
        const int64_t hi = diag ? r + 1 : cols;
        const float alpha =
            Micro::softmax_row(w.s.data() + r * kTile, docs.lo(i0 + r, j0), hi, c2, m[r], l[r]);
        if (alpha != 1.0f) Micro::scale_row(acc + r * D, D, alpha);
      }
      Micro::nn(acc, D, w.s.data(), kTile, 1, w.vr.data(), D, cols, live_rows, D,
                diag ? Tri::kLower : Tri::kFull);
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    const int64_t h = hk * G + g;
    for (int64_t r = 0; r < rows; ++r) {
      const float l = w.l[g * kTile + r];
      const float* acc = w.acc.data() + (g * kTile + r) * D;
      float* orow = o + (b * S + i0 + r) * sh.ldq + h * D;
      const float inv = 1.0f / l;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) orow[d] = acc[d] * inv;
      // Once per row, outside the tile loops: the libm log2 costs nothing here.
      lse[(b * sh.Hq + h) * S + i0 + r] = (w.m[g * kTile + r] + std::log2(l)) * kLn2;
    }
  }
}

// P and dS of tile (query tile qt of head h, key tile whose K^T, V^T are packed in w):
// w.s <- P, w.dp <- dS, and the tile's rows of Q and dO packed in w.qr, w.dor, for the
// rows that see the key tile (a prefix; returns their count, every row without
// documents). Identical arithmetic whichever pass calls it.
template <class Micro>
int64_t grad_tile(const Shape& sh, Scratch& w, const BwdArgs& a, int64_t b, int64_t h, int64_t qt,
                  int64_t kt) {
  const int64_t D = sh.D, S = sh.S;
  const int64_t i0 = qt * kTile;
  const int64_t j0 = kt * kTile, cols = std::min(kTile, S - j0);
  const Docs docs(sh, b);
  const int64_t rows = docs.rows_seeing(i0, std::min(kTile, S - i0), j0 + cols);
  const float c2 = a.scale * kLog2e;
  const int64_t qoff = (b * S + i0) * sh.ldq + h * D;
  pack_rows(w.qr.data(), a.q + qoff, sh.ldq, rows, D);
  pack_rows(w.dor.data(), a.dout + qoff, sh.ldq, rows, D);
  Micro::nt(w.s.data(), w.qr.data(), D, w.kt.data(), rows, D, qt == kt);
  Micro::nt(w.dp.data(), w.dor.data(), D, w.vt.data(), rows, D, qt == kt);
  const float* lse = a.lse + (b * sh.Hq + h) * S + i0;
  const float* delta = a.delta + (b * sh.Hq + h) * S + i0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t hi = kt == qt ? r + 1 : cols;
    Micro::grad_row(w.s.data() + r * kTile, w.dp.data() + r * kTile, docs.lo(i0 + r, j0), hi, c2,
                    lse[r] * kLog2e, delta[r], a.scale);
  }
  return rows;
}

// The first `rows` dq rows of tile (b, h, qt) += dS * K of key tile kt (dS in w.dp, K's
// rows in w.kr).
template <class Micro>
void add_dq(const Shape& sh, Scratch& w, const BwdArgs& a, int64_t b, int64_t h, int64_t qt,
            int64_t kt, int64_t rows) {
  const int64_t i0 = qt * kTile;
  const int64_t j0 = kt * kTile, cols = std::min(kTile, sh.S - j0);
  Micro::nn(a.dq + (b * sh.S + i0) * sh.ldq + h * sh.D, sh.ldq, w.dp.data(), kTile, 1, w.kr.data(),
            sh.D, cols, rows, sh.D, qt == kt ? Tri::kLower : Tri::kFull);
}

// dk, dv of key tile (b, hk, kt) over every head of the group and every query tile at or
// below the diagonal that sees it; with_dq also adds this key tile's share to dq.
template <class Micro>
void backward_kv_tile(const Shape& sh, Scratch& w, const BwdArgs& a, int64_t b, int64_t hk,
                      int64_t kt, bool with_dq) {
  const int64_t D = sh.D, S = sh.S;
  const int64_t j0 = kt * kTile, cols = std::min(kTile, S - j0);
  const int64_t qt_last = Docs(sh, b).last_query_tile(kt);
  pack_kv<Micro>(sh, w, a, b, hk, kt);
  std::fill(w.dk.data(), w.dk.data() + kTile * D, 0.0f);
  std::fill(w.dv.data(), w.dv.data() + kTile * D, 0.0f);
  for (int64_t g = 0; g < sh.group; ++g) {
    const int64_t h = hk * sh.group + g;
    for (int64_t qt = kt; qt <= qt_last; ++qt) {
      const int64_t rows = grad_tile<Micro>(sh, w, a, b, h, qt, kt);
      if (qt + 1 <= qt_last) {  // the next query tile's rows, while this one computes
        const int64_t next = (b * S + (qt + 1) * kTile) * sh.ldq + h * D;
        const int64_t next_rows = std::min(kTile, S - (qt + 1) * kTile);
        prefetch_rows(a.q + next, sh.ldq, next_rows, D);
        prefetch_rows(a.dout + next, sh.ldq, next_rows, D);
      }
      // dV[c] += sum_r P[r][c] dO[r];  dK[c] += sum_r dS[r][c] Q[r]
      const Tri tri = qt == kt ? Tri::kUpper : Tri::kFull;
      Micro::nn(w.dv.data(), D, w.s.data(), 1, kTile, w.dor.data(), D, rows, cols, D, tri);
      Micro::nn(w.dk.data(), D, w.dp.data(), 1, kTile, w.qr.data(), D, rows, cols, D, tri);
      if (with_dq) add_dq<Micro>(sh, w, a, b, h, qt, kt, rows);
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    const int64_t off = (b * S + j0 + c) * sh.ldk + hk * D;
    std::memcpy(a.dk + off, w.dk.data() + c * D, D * sizeof(float));
    std::memcpy(a.dv + off, w.dv.data() + c * D, D * sizeof(float));
  }
}

template <class Micro>
void forward(float* o, float* lse, const float* q, const float* k, const float* v, int64_t B,
             int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale, const int32_t* doc_start,
             int64_t window) {
  const KeyStarts starts(doc_start, B, S, window);
  const Shape sh = make_shape(B, S, Hq, Hkv, D, starts.get());
  const int64_t heads = B * Hkv, items = heads * sh.ntiles;
  if (items == 0) return;
#pragma omp parallel
  {
    Scratch w;
    w.kt.resize(D * kTile);
    w.vr.resize(kTile * D);
    w.s.resize(kTile * kTile);
    w.acc.resize(sh.group * kTile * D);
    w.m.resize(sh.group * kTile);
    w.l.resize(sh.group * kTile);
    // Causal rows are unequal: query tile qt costs qt + 1 key tiles. Hand out the
    // heaviest first so the dynamic schedule ends level.
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t qt = sh.ntiles - 1 - it / heads, bh = it % heads;
      forward_item<Micro>(sh, w, o, lse, q, k, v, bh / Hkv, bh % Hkv, qt, scale);
    }
  }
}

template <class Micro>
void backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
              const float* v, const float* o, const float* lse, int64_t B, int64_t S, int64_t Hq,
              int64_t Hkv, int64_t D, float scale, const int32_t* doc_start, int64_t window) {
  const KeyStarts starts(doc_start, B, S, window);
  const Shape sh = make_shape(B, S, Hq, Hkv, D, starts.get());
  const int64_t heads = B * Hkv;
  if (heads * S == 0) return;
  // delta[b, h, i] = sum_d dO * O, one fixed-order dot per row.
  AlignedBuffer<float> delta(B * Hq * S);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < B * S; ++t)
    for (int64_t h = 0; h < Hq; ++h) {
      const float* x = dout + (t * Hq + h) * D;
      const float* y = o + (t * Hq + h) * D;
      float s = 0;
      // Vectorized: a scalar chain here would cost a tenth of the backward. The order is
      // fixed at compile time, so the result does not depend on the thread count.
#pragma omp simd reduction(+ : s)
      for (int64_t d = 0; d < D; ++d) s += x[d] * y[d];
      delta[((t / S) * Hq + h) * S + t % S] = s;
    }
  const BwdArgs a{dq, dk, dv, dout, q, k, v, lse, delta.data(), scale};

  // Fused if the equal-cost (b, kv head) items keep the threads at least 75% busy: split
  // does 7/5 of the work, so below that it wins.
  const int64_t nt = std::max(1, omp_get_max_threads());
  const int64_t rounds = (heads + nt - 1) / nt;
  const bool fused = 4 * heads >= 3 * rounds * nt;

#pragma omp parallel
  {
    Scratch w;
    w.kt.resize(D * kTile);
    w.vt.resize(D * kTile);
    for (auto* rows : {&w.kr, &w.qr, &w.dor}) rows->resize(kTile * D);
    w.s.resize(kTile * kTile);
    w.dp.resize(kTile * kTile);
    w.dk.resize(kTile * D);
    w.dv.resize(kTile * D);
    if (fused) {
#pragma omp for schedule(dynamic, 1)
      for (int64_t bh = 0; bh < heads; ++bh) {
        const int64_t b = bh / Hkv, hk = bh % Hkv;
        zero_dq_rows(sh, a, b, hk, 0, S);
        for (int64_t kt = 0; kt < sh.ntiles; ++kt)
          backward_kv_tile<Micro>(sh, w, a, b, hk, kt, true);
      }
    } else {
      // Key tile kt costs ntiles - kt query tiles: heaviest first.
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < heads * sh.ntiles; ++it) {
        const int64_t kt = it / heads, bh = it % heads;
        backward_kv_tile<Micro>(sh, w, a, bh / Hkv, bh % Hkv, kt, false);
      }
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < heads * sh.ntiles; ++it) {
        const int64_t qt = sh.ntiles - 1 - it / heads, bh = it % heads;
        const int64_t b = bh / Hkv, hk = bh % Hkv;
        const int64_t i0 = qt * kTile;
        zero_dq_rows(sh, a, b, hk, i0, std::min(kTile, S - i0));
        for (int64_t kt = Docs(sh, b).first_key_tile(qt); kt <= qt; ++kt) {
          pack_kv<Micro>(sh, w, a, b, hk, kt);
          for (int64_t g = 0; g < sh.group; ++g) {
            const int64_t h = hk * sh.group + g;
            const int64_t rows = grad_tile<Micro>(sh, w, a, b, h, qt, kt);
            add_dq<Micro>(sh, w, a, b, h, qt, kt, rows);
          }
        }
      }
    }
  }
}

}  // namespace lt::LT_ISA_NS::attention_driver
