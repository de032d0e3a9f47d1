// lm-eval's bootstrap draws and replicate sums on one core: CPython's Mersenne Twister
// (`random.Random(seed)`), `choices` without weights, and each replicate's sum in Python's order.
// Built and loaded by `jaxeval/metrics/bootstrap_kernel.py`, which documents the contract.
//
// Exactness: every floating-point operation below is one IEEE double operation in the order the
// interpreter performs it. Build with `-ffp-contract=off` and without fast-math: the replicate sums
// must not be reassociated or fused. Only independent chains (different replicates) share vector
// lanes.

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if (defined(__AVX512F__) && defined(__AVX512DQ__)) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace {

constexpr int kN = 624;  // MT19937 state words
constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfU;
constexpr uint32_t kUpper = 0x80000000U;
constexpr uint32_t kLower = 0x7fffffffU;
constexpr int kGroup = 8;  // replicates summed side by side (independent add chains)

struct Stream {
  uint32_t mt[kN];  // the generator state (untempered words)
  int64_t pos;      // next unread word of `mt`; kN: twist before reading
};

void init_genrand(Stream* s, uint32_t seed) {
  uint32_t* mt = s->mt;
  mt[0] = seed;
  for (uint32_t i = 1; i < kN; i++) mt[i] = 1812433253U * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
}

// CPython's `init_by_array` (Modules/_randommodule.c), as `random.seed(int)` calls it.
void init_by_array(Stream* s, const uint32_t* key, int64_t len) {
  uint32_t* mt = s->mt;
  init_genrand(s, 19650218U);
  uint32_t i = 1, j = 0;
  for (int64_t k = kN > len ? kN : len; k; k--) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525U)) + key[j] + j;
    i++;
    j++;
    if (i >= kN) {
      mt[0] = mt[kN - 1];
      i = 1;
    }
    if (j >= len) j = 0;
  }
  for (int k = kN - 1; k; k--) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941U)) - i;
    i++;
    if (i >= kN) {
      mt[0] = mt[kN - 1];
      i = 1;
    }
  }
  mt[0] = 0x80000000U;
  s->pos = kN;
}

inline uint32_t twisted(uint32_t a, uint32_t b, uint32_t c) {
  const uint32_t y = (a & kUpper) | (b & kLower);
  return c ^ (y >> 1) ^ ((0U - (y & 1U)) & kMatrixA);
}

// The next 624 words, in place. Each loop reads words at a fixed distance from the one it writes
// (1 ahead; 397 ahead; 227 behind, already new), so each vectorises.
void twist(uint32_t* mt) {
  for (int i = 0; i < kN - kM; i++) mt[i] = twisted(mt[i], mt[i + 1], mt[i + kM]);
  for (int i = kN - kM; i < kN - 1; i++) mt[i] = twisted(mt[i], mt[i + 1], mt[i + kM - kN]);
  mt[kN - 1] = twisted(mt[kN - 1], mt[0], mt[kM - 1]);
}

inline uint32_t tempered(uint32_t y) {
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= y >> 18;
  return y;
}

// `floor(random() * n)` for `count` consecutive pairs of raw words. CPython's random() is
// `((a >> 5) * 2**26 + (b >> 6)) * 2**-53` for tempered words a, b: u = K * 2**-53 exactly, with
// K = (a >> 5) << 26 | (b >> 6) < 2**53. So `u * n` and `K * (n * 2**-53)` are the same real
// number (n * 2**-53 is exact, and no product is subnormal), rounded once to the same double; and
// truncation is floor for a non-negative value.
template <typename Index>
void indices_of_words_scalar(const uint32_t* words, int64_t count, double n, Index* out) {
  const double scaled_n = n * 0x1p-53;
  for (int64_t k = 0; k < count; k++) {
    const uint64_t a = tempered(words[2 * k]) >> 5;
    const uint64_t b = tempered(words[2 * k + 1]) >> 6;
    out[k] = static_cast<Index>(static_cast<double>(static_cast<int64_t>((a << 26) | b)) * scaled_n);
  }
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
// The same, 8 draws per step: each 64-bit lane holds one pair (a in its low half, b in its high
// half), tempered as 32-bit lanes; the conversions and products are the scalar ones, lane by lane.
inline void store_indices(__m512d x, int32_t* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvttpd_epi32(x));
}
inline void store_indices(__m512d x, int64_t* out) {
  _mm512_storeu_si512(out, _mm512_cvttpd_epi64(x));
}

template <typename Index>
void indices_of_words(const uint32_t* words, int64_t count, double n, Index* out) {
  const __m512i mask_b = _mm512_set1_epi32(static_cast<int>(0x9d2c5680U));
  const __m512i mask_c = _mm512_set1_epi32(static_cast<int>(0xefc60000U));
  const __m512i key_high = _mm512_set1_epi64(0x001ffffffc000000LL);
  const __m512d scaled_n = _mm512_set1_pd(n * 0x1p-53);
  int64_t k = 0;
  for (; k + 8 <= count; k += 8) {
    __m512i y = _mm512_loadu_si512(words + 2 * k);  // 16 words: 8 (a, b) pairs
    y = _mm512_xor_si512(y, _mm512_srli_epi32(y, 11));
    y = _mm512_xor_si512(y, _mm512_and_si512(_mm512_slli_epi32(y, 7), mask_b));
    y = _mm512_xor_si512(y, _mm512_and_si512(_mm512_slli_epi32(y, 15), mask_c));
    y = _mm512_xor_si512(y, _mm512_srli_epi32(y, 18));
    // K: bits 5..31 of the low word moved to 26..52, bits 6..31 of the high word to 0..25.
    const __m512i key = _mm512_or_si512(_mm512_and_si512(_mm512_slli_epi64(y, 21), key_high),
                                        _mm512_srli_epi64(y, 38));
    store_indices(_mm512_mul_pd(_mm512_cvtepi64_pd(key), scaled_n), out + k);
  }
  indices_of_words_scalar(words + 2 * k, count - k, n, out + k);
}
#elif defined(__AVX2__)
// The same, 4 draws per step on AVX2 (no 64-bit integer to double conversion): the 4 (a, b) pairs
// are tempered as 32-bit lanes, a >> 5 and b >> 6 gathered into two halves and converted as
// int32 (exact), and K = (a >> 5) * 2**26 + (b >> 6) formed in doubles, exactly (both terms and
// the sum are integers below 2**53); then the scalar product and truncation, lane by lane.
inline void store_indices(__m128i x, int32_t* out) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), x);
}
inline void store_indices(__m128i x, int64_t* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_cvtepi32_epi64(x));
}

template <typename Index>
void indices_of_words(const uint32_t* words, int64_t count, double n, Index* out) {
  const __m256i mask_b = _mm256_set1_epi32(static_cast<int>(0x9d2c5680U));
  const __m256i mask_c = _mm256_set1_epi32(static_cast<int>(0xefc60000U));
  const __m256i shifts = _mm256_setr_epi32(5, 6, 5, 6, 5, 6, 5, 6);
  const __m256i halves = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256d two26 = _mm256_set1_pd(0x1p26);
  const __m256d scaled_n = _mm256_set1_pd(n * 0x1p-53);
  int64_t k = 0;
  for (; k + 4 <= count; k += 4) {
    __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + 2 * k));
    y = _mm256_xor_si256(y, _mm256_srli_epi32(y, 11));
    y = _mm256_xor_si256(y, _mm256_and_si256(_mm256_slli_epi32(y, 7), mask_b));
    y = _mm256_xor_si256(y, _mm256_and_si256(_mm256_slli_epi32(y, 15), mask_c));
    y = _mm256_xor_si256(y, _mm256_srli_epi32(y, 18));
    y = _mm256_permutevar8x32_epi32(_mm256_srlv_epi32(y, shifts), halves);  // a's | b's
    const __m256d high = _mm256_cvtepi32_pd(_mm256_castsi256_si128(y));
    const __m256d low = _mm256_cvtepi32_pd(_mm256_extracti128_si256(y, 1));
    const __m256d key = _mm256_add_pd(_mm256_mul_pd(high, two26), low);
    store_indices(_mm256_cvttpd_epi32(_mm256_mul_pd(key, scaled_n)), out + k);
  }
  indices_of_words_scalar(words + 2 * k, count - k, n, out + k);
}
#else
template <typename Index>
void indices_of_words(const uint32_t* words, int64_t count, double n, Index* out) {
  indices_of_words_scalar(words, count, n, out);
}
#endif

// The stream's next `count` indices below n (one random() each). 624 is even and every read takes
// two words, so a pair never straddles a twist.
template <typename Index>
void draw(Stream* s, int64_t n, int64_t count, Index* out) {
  const double dn = static_cast<double>(n);
  while (count > 0) {
    if (s->pos == kN) {
      twist(s->mt);
      s->pos = 0;
    }
    int64_t take = (kN - s->pos) / 2;
    if (take > count) take = count;
    indices_of_words(s->mt + s->pos, take, dn, out);
    s->pos += 2 * take;
    out += take;
    count -= take;
  }
}

// Python 3.11's `sum` of floats: 0.0 + x0 + x1 + ..., left to right, for G replicates whose
// indices are rows of `idx` ([G, n]); the G chains are independent, each adds in its own order.
template <int G>
void sequential_sums(const int32_t* idx, int64_t n, const double* v, double* out) {
  double s[G];
  for (int g = 0; g < G; g++) s[g] = 0.0;
  for (int64_t j = 0; j < n; j++) {
    for (int g = 0; g < G; g++) s[g] += v[idx[g * n + j]];
  }
  for (int g = 0; g < G; g++) out[g] = s[g];
}

// Python 3.12's `sum` of floats (Neumaier): s = 0.0 + x0, then t = s + x and
// c += (s - t) + x if |s| >= |x| else (x - t) + s, s = t; s + c at the end where c is non-zero
// and finite.
template <int G>
void compensated_sums(const int32_t* idx, int64_t n, const double* v, double* out) {
  double s[G], c[G];
  for (int g = 0; g < G; g++) {
    s[g] = 0.0 + v[idx[g * n]];
    c[g] = 0.0;
  }
  for (int64_t j = 1; j < n; j++) {
    for (int g = 0; g < G; g++) {
      const double x = v[idx[g * n + j]];
      const double t = s[g] + x;
      c[g] += std::fabs(s[g]) >= std::fabs(x) ? (s[g] - t) + x : (x - t) + s[g];
      s[g] = t;
    }
  }
  for (int g = 0; g < G; g++) out[g] = (c[g] != 0.0 && std::isfinite(c[g])) ? s[g] + c[g] : s[g];
}

template <int G>
void row_sums(const int32_t* idx, int64_t n, const double* v, int compensated, double* out) {
  if (compensated) {
    compensated_sums<G>(idx, n, v, out);
  } else {
    sequential_sums<G>(idx, n, v, out);
  }
}

}  // namespace

extern "C" {

int64_t jaxeval_bootstrap_stream_size() { return sizeof(Stream); }

// `random.Random(seed)`: `key` holds the 32-bit words of abs(seed), least significant first
// ([0] for 0).
void jaxeval_bootstrap_seed(void* stream, const uint32_t* key, int64_t len) {
  init_by_array(static_cast<Stream*>(stream), key, len);
}

// The next `count` draws of `choices(range(n), k=...)` as int64.
void jaxeval_bootstrap_indices(void* stream, int64_t n, int64_t count, int64_t* out) {
  draw(static_cast<Stream*>(stream), n, count, out);
}

// The next `rows` replicates of n draws each: out_k[r] = sum(columns[k][i] for i in replicate r),
// for `ncols` value columns of n doubles sharing the draws. n < 2**31. Returns 0, or -1 when
// memory runs out (nothing drawn then).
int jaxeval_bootstrap_row_sums(void* stream, int64_t n, int64_t rows, const double* const* columns,
                               int64_t ncols, int compensated, double* const* out) {
  Stream* s = static_cast<Stream*>(stream);
  int32_t* idx = static_cast<int32_t*>(std::malloc(sizeof(int32_t) * kGroup * n));
  if (idx == nullptr) return -1;
  int64_t r = 0;
  for (; r + kGroup <= rows; r += kGroup) {
    draw(s, n, kGroup * n, idx);
    for (int64_t k = 0; k < ncols; k++) row_sums<kGroup>(idx, n, columns[k], compensated, out[k] + r);
  }
  for (; r < rows; r++) {
    draw(s, n, n, idx);
    for (int64_t k = 0; k < ncols; k++) row_sums<1>(idx, n, columns[k], compensated, out[k] + r);
  }
  std::free(idx);
  return 0;
}

}  // extern "C"
