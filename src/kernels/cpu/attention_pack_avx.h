// Causal GQA attention: K^T / V^T tile packing with 8 x 8 transposes in ymm registers, for
// the avx2 and avx512 levels (attention_avx2.cpp, attention_avx512.cpp). The baseline
// pack_transposed (attention_tiles.h) moves one float per load and store, about a fifth
// of a forward with one head per kv head (perf, D = 64); this moves 8 rows x 8 columns
// with 8 loads, 24 shuffles and 8 stores. A copy: the values, hence every result, are the same.
// Include <immintrin.h> and attention_tiles.h before core/isa_target.h, and this file after
// it (per-level code in namespace lt::LT_ISA_NS).
#if !defined(LT_ISA_NS) || LT_ISA_TARGET == 0
#error "include core/isa_target.h for the avx2 or avx512 level before this file"
#endif

namespace lt::LT_ISA_NS::attention_pack {

using ::lt::attention_tiles::kTile;

// r[i][j] <- r[j][i].
inline void transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    const int a = 4 * i;  // rows 0-3, then 4-7
    u[a + 0] = _mm256_shuffle_ps(t[a + 0], t[a + 2], 0x44);
    u[a + 1] = _mm256_shuffle_ps(t[a + 0], t[a + 2], 0xEE);
    u[a + 2] = _mm256_shuffle_ps(t[a + 1], t[a + 3], 0x44);
    u[a + 3] = _mm256_shuffle_ps(t[a + 1], t[a + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// Bt[d][c] = src[c * ld + d] for c < cols, zero for cols <= c < kTile (as
// attention_tiles::pack_transposed).
inline void pack_transposed(float* bt, const float* src, int64_t ld, int64_t cols, int64_t D) {
  const int64_t c8 = cols / 8 * 8, d8 = D / 8 * 8;
  for (int64_t c0 = 0; c0 < c8; c0 += 8) {
    for (int64_t d0 = 0; d0 < d8; d0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (c0 + i) * ld + d0);
      transpose8x8(r);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(bt + (d0 + j) * kTile + c0, r[j]);
    }
    for (int64_t c = c0; c < c0 + 8; ++c)
      for (int64_t d = d8; d < D; ++d) bt[d * kTile + c] = src[c * ld + d];
  }
  for (int64_t c = c8; c < cols; ++c)
    for (int64_t d = 0; d < D; ++d) bt[d * kTile + c] = src[c * ld + d];
  if (cols < kTile)
    for (int64_t d = 0; d < D; ++d) std::fill(bt + d * kTile + cols, bt + (d + 1) * kTile, 0.0f);
}

}  // namespace lt::LT_ISA_NS::attention_pack
