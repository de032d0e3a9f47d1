// Fused attention for XLA:CPU (FFI custom calls): decode steps over the stacked KV cache
// (JaxevalDecodeAttention, below) and packed rows / a prefill's own keys (JaxevalPackedAttention,
// after it).
//
// Decode attention over one layer of the stacked KV cache, fused, for XLA:CPU (an FFI custom call).
//
// The Python side (`jaxeval/ops/attention/cpu.py`) builds this file once per machine; the `cpu`
// backend calls it for decode steps (T = 1) on the CPU. It returns the online-softmax state over
// the cache slots that the reference's `cache_state` block loop would return, and the caller folds
// the step's own key in exactly as before. Shapes (one kv head g of row b is one task):
//
//   q        [B, G, M, E]   float32   the X query heads of a kv head (M = X, T = 1)
//   k        [L, B, G, E, C] float32  keys, slots minor (contract.KVCache)
//   v        [L, B, G, C, E] float32  values
//   layer    []  int32                which of the L layers to read
//   bound    [B] int32                row b reads slots [0, bound[b]) (its cache index)
//   valid    [B, C] pred              slot holds a real token
//   slot_pos [B, C] int32             that token's position (sliding windows)
//   q_pos    [B] int32                the query's position
//   window   []  int32                window size (read when the attribute windowed != 0)
//   scale    []  float32              score scale, applied after the dot (HF's order)
//   softcap  attribute float          tanh soft cap after the scale (0: none)
//   ->  m [B, G, M] (running max), total [B, G, M] (sum of exp), acc [B, G, M, E] (sum of exp * v)
//
// Slot j is visible iff j < bound[b], valid[b, j] and (not windowed or q_pos[b] - slot_pos[b, j] <
// window). A query that sees no slot returns (MASKED, 0, 0), which folds into the caller's state as
// `cache_attend`'s "nothing seen". Each (b, g) task reads its K slab once ([E, n] rows of n
// contiguous slots) and its V slab once ([n, E]); the tasks are spread over XLA's intra-op thread
// pool, the calling thread taking its share, so a step streams K/V on every core.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr float kMasked = -0.7f * 3.40282346638528859811704183484516925440e+38f;  // attention.MASKED

struct Problem {
  const float* q;
  const float* k;  // this layer's [B, G, E, C]
  const float* v;  // this layer's [B, G, C, E]
  const int32_t* bound;
  const bool* valid;
  const int32_t* slot_pos;
  const int32_t* q_pos;
  int64_t heads, m, e, c;
  float scale, softcap;
  int32_t window;
  bool windowed;
  float* m_out;
  float* total_out;
  float* acc_out;
};

// Eight float lanes (GCC/Clang vector extensions: AVX on x86-64, two NEON registers on ARM).
typedef float V8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));
constexpr int kW = 8;

inline V8 Load(const float* p) {
  V8 r;
  std::memcpy(&r, p, sizeof r);
  return r;
}
inline void Store(float* p, V8 x) { std::memcpy(p, &x, sizeof x); }
inline V8 Splat(float x) { return V8{} + x; }

// exp(x) for x <= 0 (softmax weights): Cody-Waite range reduction and Cephes' degree-6 polynomial
// (at most 1.01 ulp from the true value over [-86.9, 0], as XLA:CPU's own exp is a polynomial too);
// x < -87 (a hidden slot is -inf) gives exactly 0, where the true value is below 1.7e-38.
inline V8 ExpNonPositive(V8 x) {
  const V8 xc = x < -87.0f ? Splat(-87.0f) : x;
  const V8 n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  V8 r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V8 p = Splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  I8 bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += __builtin_convertvector(n, I8) << 23;  // times 2^n
  V8 out;
  std::memcpy(&out, &bits, sizeof out);
  return x < -87.0f ? V8{} : out;
}

inline float ExpNonPositive(float x) {
  float lanes[kW] = {x};
  Store(lanes, ExpNonPositive(Load(lanes)));
  return lanes[0];
}

inline float MaxOf(V8 x) {
  float l[kW];
  Store(l, x);
  return *std::max_element(l, l + kW);
}

inline float SumOf(V8 x) {
  float l[kW];
  Store(l, x);
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

constexpr int kGroup = 3;            // queries per register block

// s[i, j] += q[i, d:d+R] . k[d:d+R, j] for MB queries (q [MB, E]) and slots [0, n) of k [E, C]:
// the R rows' slots are loaded once, and each score takes their R products in order (one fused
// multiply-add each) in a register between one load and one store.
template <int MB, int R>
inline void ScoreRows(const float* q, int64_t E, const float* k, int64_t C, int64_t d, int64_t n,
                      float* s, int64_t stride) {
  const int64_t n8 = n / kW * kW;
  const float* kd = k + d * C;
  V8 qd[R][MB];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < MB; ++i) qd[r][i] = Splat(q[i * E + d + r]);
  }
  for (int64_t j = 0; j < n8; j += kW) {
    V8 kr[R];
    for (int r = 0; r < R; ++r) {
      __builtin_prefetch(kd + (R + r) * C + j);  // the next R rows' same slots
      kr[r] = Load(kd + r * C + j);
    }
    for (int i = 0; i < MB; ++i) {
      V8 x = Load(s + i * stride + j);
      for (int r = 0; r < R; ++r) x = x + qd[r][i] * kr[r];
      Store(s + i * stride + j, x);
    }
  }
  for (int64_t j = n8; j < n; ++j) {
    for (int i = 0; i < MB; ++i) {
      float x = s[i * stride + j];
      for (int r = 0; r < R; ++r) x += q[i * E + d + r] * kd[r * C + j];
      s[i * stride + j] = x;
    }
  }
}

// s[i, j] = q[i] . k[:, j] for MB queries (q [MB, E]) and slots [0, n) of k [E, C] (slots
// minor): k's E rows are streamed once, eight at a time (then one at a time), into the [MB, n]
// scores (in L1); each score adds the E products in order.
template <int MB>
void Scores(const float* q, int64_t E, const float* k, int64_t C, int64_t n, float* s,
            int64_t stride) {
  for (int i = 0; i < MB; ++i) std::fill(s + i * stride, s + i * stride + n, 0.0f);
  int64_t d = 0;
  for (; d + 8 <= E; d += 8) ScoreRows<MB, 8>(q, E, k, C, d, n, s, stride);
  for (; d < E; ++d) ScoreRows<MB, 1>(q, E, k, C, d, n, s, stride);
}

// a[i] += sum over r in [r0, r1) of x[i * xs + r] * b[r * bs : r * bs + 16], for MB rows held in
// MB x 16 registers: the inner loop of the packed kernel's scores.
template <int MB>
inline void Accumulate16(const float* x, int64_t xs, const float* b, int64_t bs, int64_t r0,
                         int64_t r1, V8 (&a)[MB][2]) {
  for (int64_t r = r0; r < r1; ++r) {
    const V8 b0 = Load(b + r * bs), b1 = Load(b + r * bs + kW);
    for (int i = 0; i < MB; ++i) {
      const V8 xi = Splat(x[i * xs + r]);
      a[i][0] += xi * b0;
      a[i][1] += xi * b1;
    }
  }
}

// out[i, :] += sum_j w[i, j] v[j, :] for MB queries (w [MB, stride]) over slots [j0, j1) of v
// [C, E]: v is read once, in order, four slots at a time; out (MB x E, in L1) takes the four
// slots' products in slot order, so every output adds its terms in slot order (fused
// multiply-adds), as a loop over j would.
template <int MB>
void Values(const float* w, int64_t stride, const float* v, int64_t E, int64_t j0, int64_t j1,
            float* out) {
  const int64_t e8 = E / kW * kW;
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    V8 wj[MB][4];
    for (int i = 0; i < MB; ++i) {
      for (int r = 0; r < 4; ++r) wj[i][r] = Splat(w[i * stride + j + r]);
    }
    const float* vj = v + j * E;
    for (int64_t c = 0; c < e8; c += kW) {
      const V8 v0 = Load(vj + c), v1 = Load(vj + E + c), v2 = Load(vj + 2 * E + c),
               v3 = Load(vj + 3 * E + c);
      for (int i = 0; i < MB; ++i) {
        V8 x = Load(out + i * E + c);
        x = x + wj[i][0] * v0;
        x = x + wj[i][1] * v1;
        x = x + wj[i][2] * v2;
        x = x + wj[i][3] * v3;
        Store(out + i * E + c, x);
      }
    }
    for (int64_t c = e8; c < E; ++c) {
      for (int i = 0; i < MB; ++i) {
        float x = out[i * E + c];
        for (int r = 0; r < 4; ++r) x += w[i * stride + j + r] * vj[r * E + c];
        out[i * E + c] = x;
      }
    }
  }
  for (; j < j1; ++j) {
    for (int64_t c = 0; c < E; ++c) {
      for (int i = 0; i < MB; ++i) out[i * E + c] += w[i * stride + j] * v[j * E + c];
    }
  }
}

// f(std::integral_constant<int, MB>, i0) for the rows [i0, i0 + MB) of M in groups of up to G,
// so that each group's register block has a size known at compile time.
template <int G, class F>
void ForGroupsOf(int64_t M, F&& f) {
  static_assert(G >= 1 && G <= 6);
  for (int64_t i0 = 0; i0 < M; i0 += G) {
    switch (std::min<int64_t>(G, M - i0)) {
      case 1: f(std::integral_constant<int, 1>{}, i0); break;
      case 2: f(std::integral_constant<int, 2>{}, i0); break;
      case 3: if constexpr (G >= 3) f(std::integral_constant<int, 3>{}, i0); break;
      case 4: if constexpr (G >= 4) f(std::integral_constant<int, 4>{}, i0); break;
      case 5: if constexpr (G >= 5) f(std::integral_constant<int, 5>{}, i0); break;
      default: if constexpr (G >= 6) f(std::integral_constant<int, 6>{}, i0); break;
    }
  }
}

// One (row, kv head): scores of its M queries over the visible slots, softmax state, p . v.
void AttendOne(const Problem& p, int64_t task, std::vector<float>& scratch) {
  const int64_t b = task / p.heads;
  const int64_t M = p.m, E = p.e, C = p.c;
  const float* q = p.q + task * M * E;  // [M, E]
  const float* k = p.k + task * E * C;  // [E, C]
  const float* v = p.v + task * C * E;  // [C, E]
  const bool* ok = p.valid + b * C;
  const int32_t* kpos = p.slot_pos + b * C;
  const int64_t n = std::min<int64_t>(std::max<int32_t>(p.bound[b], 0), C);
  float* m_out = p.m_out + task * M;
  float* total_out = p.total_out + task * M;
  float* acc = p.acc_out + task * M * E;
  std::fill(acc, acc + M * E, 0.0f);
  for (int64_t i = 0; i < M; ++i) {
    m_out[i] = kMasked;
    total_out[i] = 0.0f;
  }
  if (n == 0) return;
  const int64_t n8 = n / kW * kW;
  scratch.resize(M * n + n);
  float* s = scratch.data();  // [M, n]
  float* hidden = s + M * n;  // [n]: 0 where the slot is visible, -inf where not
  const int32_t qp = p.q_pos[b];
  for (int64_t j = 0; j < n; ++j) {
    hidden[j] = (ok[j] && (!p.windowed || qp - kpos[j] < p.window)) ? 0.0f : -INFINITY;
  }
  ForGroupsOf<kGroup>(M, [&](auto mb, int64_t i0) {
    Scores<mb>(q + i0 * E, E, k, C, n, s + i0 * n, n);
  });
  bool any_visible = false;
  for (int64_t i = 0; i < M; ++i) {
    float* si = s + i * n;
    if (p.softcap != 0.0f) {
      for (int64_t j = 0; j < n; ++j) si[j] = std::tanh(si[j] * p.scale / p.softcap) * p.softcap;
    } else {
      for (int64_t j = 0; j < n; ++j) si[j] = si[j] * p.scale;
    }
    V8 lanes = Splat(-INFINITY);
    for (int64_t j = 0; j < n8; j += kW) {
      const V8 x = Load(si + j) + Load(hidden + j);  // x + 0 = x; x - inf = -inf
      Store(si + j, x);
      lanes = lanes > x ? lanes : x;
    }
    float best = MaxOf(lanes);
    for (int64_t j = n8; j < n; ++j) {
      si[j] += hidden[j];
      best = std::max(best, si[j]);
    }
    if (best == -INFINITY) {  // nothing visible: weights 0, the state stays "nothing seen"
      std::fill(si, si + n, 0.0f);
      continue;
    }
    any_visible = true;
    V8 sums{};
    for (int64_t j = 0; j < n8; j += kW) {
      const V8 w = ExpNonPositive(Load(si + j) - best);  // 0 for hidden slots
      Store(si + j, w);
      sums += w;
    }
    float total = SumOf(sums);
    for (int64_t j = n8; j < n; ++j) {
      si[j] = ExpNonPositive(si[j] - best);
      total += si[j];
    }
    m_out[i] = best;
    total_out[i] = total;
  }
  if (!any_visible) return;
  ForGroupsOf<kGroup>(M, [&](auto mb, int64_t i0) {
    Values<mb>(s + i0 * n, n, v, E, 0, n, acc + i0 * E);
  });
}

// Tasks handed out by an atomic counter to the calling thread and to pool helpers; the caller
// waits for the last one. Helpers hold the state by shared_ptr, so one that starts after the call
// returned finds no task and touches nothing else.
struct Shared {
  std::function<void(int64_t, std::vector<float>&)> task;
  int64_t tasks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable cv;
};

void Work(Shared* sh) {
  std::vector<float> scratch;
  int64_t mine = 0;
  for (int64_t t; (t = sh->next.fetch_add(1)) < sh->tasks; ++mine) sh->task(t, scratch);
  if (mine && sh->done.fetch_add(mine) + mine == sh->tasks) {
    std::lock_guard<std::mutex> lock(sh->mu);
    sh->cv.notify_all();
  }
}

template <class F>
void RunTasks(ffi::ThreadPool& pool, int64_t tasks, F&& task) {
  if (tasks <= 0) return;
  auto sh = std::make_shared<Shared>();
  sh->task = std::forward<F>(task);
  sh->tasks = tasks;
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), tasks - 1);
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([sh] { Work(sh.get()); });
  Work(sh.get());
  std::unique_lock<std::mutex> lock(sh->mu);
  sh->cv.wait(lock, [&] { return sh->done.load() == sh->tasks; });
}

ffi::Error DecodeAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                           ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::S32> layer,
                           ffi::Buffer<ffi::S32> bound, ffi::Buffer<ffi::PRED> valid,
                           ffi::Buffer<ffi::S32> slot_pos, ffi::Buffer<ffi::S32> q_pos,
                           ffi::Buffer<ffi::S32> window, ffi::Buffer<ffi::F32> scale, float softcap,
                           int32_t windowed, ffi::ResultBuffer<ffi::F32> m_out,
                           ffi::ResultBuffer<ffi::F32> total_out, ffi::ResultBuffer<ffi::F32> acc_out) {
  auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  if (qd.size() != 4 || kd.size() != 5 || vd.size() != 5) {
    return ffi::Error::InvalidArgument("jaxeval_decode_attention: q must be rank 4, k and v rank 5");
  }
  const int64_t L = kd[0], B = qd[0], G = qd[1], M = qd[2], E = qd[3], C = kd[4];
  if (kd[1] != B || kd[2] != G || kd[3] != E || vd[0] != L || vd[1] != B || vd[2] != G ||
      vd[3] != C || vd[4] != E || valid.element_count() != B * C ||
      slot_pos.element_count() != B * C || bound.element_count() != B ||
      q_pos.element_count() != B) {
    return ffi::Error::InvalidArgument("jaxeval_decode_attention: operand shapes disagree");
  }
  const int32_t l = layer.typed_data()[0];
  if (l < 0 || l >= L) return ffi::Error::InvalidArgument("jaxeval_decode_attention: layer out of range");
  const int64_t slab = B * G * E * C;
  const Problem problem{q.typed_data(), k.typed_data() + l * slab, v.typed_data() + l * slab,
                        bound.typed_data(), valid.typed_data(), slot_pos.typed_data(),
                        q_pos.typed_data(), G, M, E, C, scale.typed_data()[0], softcap,
                        window.typed_data()[0], windowed != 0, m_out->typed_data(),
                        total_out->typed_data(), acc_out->typed_data()};
  RunTasks(pool, B * G, [problem](int64_t t, std::vector<float>& scratch) {
    AttendOne(problem, t, scratch);
  });
  return ffi::Error::Success();
}

// ---- Prefill / scoring: `attention.blocked_attend`'s packed-row rule, fused ---------------------
//
// `attention.blocked_attend` (`jaxeval/ops/attention/cpu.py`, `cpu_packed`), any T:
//
//   q        [B, T, H, E]   float32   H = G * X query heads
//   kt       [B, G, E, T]   float32   keys, transposed by the caller (tokens minor)
//   v        [B, G, T, E]   float32   values
//   segment, parent, positions [B, T] int32   the packing rule of `attention`'s module docstring
//   m0, total0 [B, G, X, T], acc0 [B, G, X, T, E] float32   the online-softmax state to continue
//                                    (a prefill's cached prefix; "nothing seen" otherwise)
//   window   []  int32                read when the attribute windowed != 0
//   scale    []  float32              after the dot, then the soft cap (attribute, 0: none)
//   ->  out  [B, T, H, E]             acc / total (acc where total is 0), `_Online.finish`
//
// One task is (row b, kv head g, up to kQueries queries): its X * nq query rows walk the key
// blocks up to their last query. Per block: the visibility of its keys to each query (eight at a
// time), skipped when no query sees one; the block's keys copied into contiguous 16-key strips
// ([E, 16] each: `kt`'s rows are T floats apart, so a strip read in place touches E pages); the
// scores in MB x 16 register blocks (up to 6 rows); scale, soft cap, mask and row max; the
// correction of the running state and a vectorized exp (0 for hidden keys); the weighted values in
// MB x 16 register blocks (up to 4 rows). Queries that see no key at all (padding) keep their init
// state and are never read. Every score and output adds its terms in the same order whatever the
// blocking (docs/performance.md, "The fused CPU prefill and scoring attention").

constexpr int64_t kQueries = 16;  // queries per task (times the X heads of one kv head: its rows)
constexpr int64_t kKeys = 128;    // keys per block: the [R, kKeys] scores stay in L1/L2

struct Packed {
  const float* q;       // [B, T, H, E]
  const float* kt;      // [B, G, E, T]
  const float* v;       // [B, G, T, E]
  const int32_t* seg;   // [B, T]
  const int32_t* par;   // [B, T]
  const int32_t* pos;   // [B, T]
  const float* m0;      // [B, G, X, T]
  const float* total0;  // [B, G, X, T]
  const float* acc0;    // [B, G, X, T, E]
  int64_t t, g, x, e;
  float scale, softcap;
  int32_t window;
  bool windowed;
  float* out;  // [B, T, H, E]
};

// s[i, 0:16] = q[i] . strip[:, 0:16] for MB queries (q [MB, E]) and one 16-key strip [E, 16]
// (contiguous): MB x 16 scores in registers while the strip's E rows stream by (from L1: every
// row group of a task reads the same 4 KB strip); each score adds its E products in order.
template <int MB>
inline void ScoreStrip(const float* q, int64_t E, const float* strip, float* s, int64_t stride) {
  V8 a[MB][2] = {};
  Accumulate16<MB>(q, E, strip, 2 * kW, 0, E, a);
  for (int i = 0; i < MB; ++i) {
    Store(s + i * stride, a[i][0]);
    Store(s + i * stride + kW, a[i][1]);
  }
}

// One (row b, kv head g, block of up to kQueries queries): its R = X * nq query rows (row
// x * nq + i is head g * X + x at query t0 + i) over key blocks [j0, j0 + kKeys) up to the last
// query, online softmax from the init state, then acc / total (`_Online.finish`).
void PackedOne(const Packed& p, int64_t task, std::vector<float>& scratch) {
  const int64_t T = p.t, G = p.g, X = p.x, E = p.e, H = G * X;
  const int64_t blocks = (T + kQueries - 1) / kQueries;
  const int64_t b = task / (G * blocks), g = task / blocks % G, t0 = task % blocks * kQueries;
  const int64_t nq = std::min(kQueries, T - t0), R = X * nq;
  scratch.resize(R * E + R * E + R * kKeys + nq * kKeys + 2 * R + E * kKeys);  // kKeys % 16 == 0
  float* qs = scratch.data();      // [R, E] the query rows, contiguous
  float* acc = qs + R * E;         // [R, E]
  float* s = acc + R * E;          // [R, kKeys] scores, then weights
  float* hide = s + R * kKeys;     // [nq, kKeys] 0 where visible, -inf where not
  float* m = hide + nq * kKeys;    // [R]
  float* total = m + R;            // [R]
  float* strips = total + R;       // [kKeys / 16, E, 16] the block's keys, strip after strip
  const int32_t* seg = p.seg + b * T;
  const int32_t* par = p.par + b * T;
  const int32_t* pos = p.pos + b * T;
  for (int64_t x = 0; x < X; ++x) {
    const int64_t state = ((b * G + g) * X + x) * T + t0;  // [B, G, X, T] index of query t0
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t r = x * nq + i;
      std::memcpy(qs + r * E, p.q + ((b * T + t0 + i) * H + g * X + x) * E, E * sizeof(float));
      std::memcpy(acc + r * E, p.acc0 + (state + i) * E, E * sizeof(float));
      m[r] = p.m0[state + i];
      total[r] = p.total0[state + i];
    }
  }
  const float* kt = p.kt + (b * G + g) * E * T;  // [E, T]
  const float* v = p.v + (b * G + g) * T * E;    // [T, E]
  for (int64_t j0 = 0; j0 < t0 + nq; j0 += kKeys) {
    const int64_t n = std::min(kKeys, t0 + nq - j0);
    // Key j is seen by query t iff j <= t, seg[j] != 0, seg[j] is seg[t] or par[t], and (with
    // a window) pos[t] - pos[j] < window: eight keys at a time, n rounded up to 8 (the keys past
    // n are read from the padded copies below and hidden by j <= t or by j >= T's segment 0).
    const int64_t n8 = (n + kW - 1) / kW * kW;
    int32_t kseg[kKeys], kpos[kKeys], kidx[kKeys];
    for (int64_t jj = 0; jj < n8; ++jj) {
      const int64_t j = j0 + jj;
      kseg[jj] = j < T ? seg[j] : 0;
      kpos[jj] = j < T ? pos[j] : 0;
      kidx[jj] = static_cast<int32_t>(j);
    }
    I8 seen_any{};
    for (int64_t i = 0; i < nq; ++i) {
      const int32_t t = static_cast<int32_t>(t0 + i);
      const I8 st = I8{} + seg[t], pt = I8{} + par[t], qt = I8{} + t, post = I8{} + pos[t];
      const I8 win = I8{} + p.window;
      for (int64_t jj = 0; jj < n8; jj += kW) {
        I8 sk, pk, jk;
        std::memcpy(&sk, kseg + jj, sizeof sk);
        std::memcpy(&pk, kpos + jj, sizeof pk);
        std::memcpy(&jk, kidx + jj, sizeof jk);
        I8 seen = (jk <= qt) & (sk != 0) & ((sk == st) | (sk == pt));
        if (p.windowed) seen &= (post - pk) < win;
        seen_any |= seen;
        const I8 bits = ~seen & static_cast<int32_t>(0xff800000u);  // 0.0f or -inf
        std::memcpy(hide + i * kKeys + jj, &bits, sizeof bits);
      }
    }
    bool any = false;
    for (int l = 0; l < kW; ++l) any |= seen_any[l] != 0;
    if (!any) continue;  // a block no query of this task sees (another segment, the window)
    const int64_t n16 = n / (2 * kW) * (2 * kW);
    for (int64_t d = 0; d < E; ++d) {  // strip j / 16 holds keys [j, j + 16) as [E, 16]
      const float* row = kt + d * T + j0;
      for (int64_t j = 0; j < n16; j += 2 * kW) {
        Store(strips + j * E + d * 2 * kW, Load(row + j));
        Store(strips + j * E + d * 2 * kW + kW, Load(row + j + kW));
      }
    }
    for (int64_t j = 0; j < n16; j += 2 * kW) {  // key strips outer: each stays in L1
      ForGroupsOf<6>(R, [&](auto mb, int64_t r0) {
        ScoreStrip<mb>(qs + r0 * E, E, strips + j * E, s + r0 * kKeys + j, kKeys);
      });
    }
    for (int64_t r = 0; r < R; ++r) {  // the last n % 16 keys
      for (int64_t j = n16; j < n; ++j) {
        float dot = 0.0f;
        for (int64_t d = 0; d < E; ++d) dot += qs[r * E + d] * kt[d * T + j0 + j];
        s[r * kKeys + j] = dot;
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      float* sr = s + r * kKeys;
      const float* hr = hide + (r % nq) * kKeys;
      std::fill(sr + n, sr + n8, 0.0f);  // finite scores past n, which `hr` hides
      if (p.softcap != 0.0f) {
        for (int64_t jj = 0; jj < n; ++jj) sr[jj] = std::tanh(sr[jj] * p.scale / p.softcap) * p.softcap;
      }
      const float scale = p.softcap != 0.0f ? 1.0f : p.scale;
      V8 lanes = Splat(-INFINITY);
      for (int64_t jj = 0; jj < n8; jj += kW) {  // scores past n: their hide is -inf
        const V8 x = Load(sr + jj) * scale + Load(hr + jj);  // + 0, or - inf where not seen
        Store(sr + jj, x);
        lanes = lanes > x ? lanes : x;
      }
      const float best = MaxOf(lanes);
      if (best == -INFINITY) {  // this query sees no key of the block: its state stays
        std::fill(sr, sr + n, 0.0f);
        continue;
      }
      const float m_new = std::max(m[r], best);
      const float correction = ExpNonPositive(m[r] - m_new);
      V8 sums{};
      for (int64_t jj = 0; jj < n8; jj += kW) {
        const V8 w = ExpNonPositive(Load(sr + jj) - m_new);  // 0 for hidden keys
        Store(sr + jj, w);
        sums += w;
      }
      const float added = SumOf(sums);
      m[r] = m_new;
      total[r] = total[r] * correction + added;
      if (correction != 1.0f) {
        for (int64_t d = 0; d < E; ++d) acc[r * E + d] *= correction;
      }
    }
    ForGroupsOf<4>(R, [&](auto mb, int64_t r0) {
      Values<mb>(s + r0 * kKeys, kKeys, v + j0 * E, E, 0, n, acc + r0 * E);
    });
  }
  for (int64_t x = 0; x < X; ++x) {
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t r = x * nq + i;
      const float div = total[r] > 0.0f ? total[r] : 1.0f;
      float* o = p.out + ((b * T + t0 + i) * H + g * X + x) * E;
      for (int64_t d = 0; d < E; ++d) o[d] = acc[r * E + d] / div;
    }
  }
}

ffi::Error PackedAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> kt,
                           ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::S32> seg,
                           ffi::Buffer<ffi::S32> par, ffi::Buffer<ffi::S32> pos,
                           ffi::Buffer<ffi::F32> m0, ffi::Buffer<ffi::F32> total0,
                           ffi::Buffer<ffi::F32> acc0, ffi::Buffer<ffi::S32> window,
                           ffi::Buffer<ffi::F32> scale, float softcap, int32_t windowed,
                           ffi::ResultBuffer<ffi::F32> out) {
  auto qd = q.dimensions(), kd = kt.dimensions(), vd = v.dimensions(), md = m0.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || md.size() != 4 ||
      acc0.dimensions().size() != 5) {
    return ffi::Error::InvalidArgument("jaxeval_packed_attention: operand ranks");
  }
  const int64_t B = qd[0], T = qd[1], H = qd[2], E = qd[3], G = kd[1];
  if (G == 0 || H % G != 0 || kd[0] != B || kd[2] != E || kd[3] != T || vd[0] != B ||
      vd[1] != G || vd[2] != T || vd[3] != E || md[0] != B || md[1] != G || md[2] != H / G ||
      md[3] != T || total0.element_count() != B * H * T || acc0.element_count() != B * H * T * E ||
      seg.element_count() != B * T || par.element_count() != B * T ||
      pos.element_count() != B * T || out->element_count() != B * T * H * E) {
    return ffi::Error::InvalidArgument("jaxeval_packed_attention: operand shapes disagree");
  }
  const Packed packed{q.typed_data(), kt.typed_data(), v.typed_data(), seg.typed_data(),
                      par.typed_data(), pos.typed_data(), m0.typed_data(), total0.typed_data(),
                      acc0.typed_data(), T, G, H / G, E, scale.typed_data()[0], softcap,
                      window.typed_data()[0], windowed != 0, out->typed_data()};
  const int64_t blocks = (T + kQueries - 1) / kQueries;
  RunTasks(pool, B * G * blocks, [packed](int64_t t, std::vector<float>& scratch) {
    PackedOne(packed, t, scratch);
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxevalDecodeAttention, DecodeAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // q
                                  .Arg<ffi::Buffer<ffi::F32>>()   // k
                                  .Arg<ffi::Buffer<ffi::F32>>()   // v
                                  .Arg<ffi::Buffer<ffi::S32>>()   // layer
                                  .Arg<ffi::Buffer<ffi::S32>>()   // bound
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // valid
                                  .Arg<ffi::Buffer<ffi::S32>>()   // slot_pos
                                  .Arg<ffi::Buffer<ffi::S32>>()   // q_pos
                                  .Arg<ffi::Buffer<ffi::S32>>()   // window
                                  .Arg<ffi::Buffer<ffi::F32>>()   // scale
                                  .Attr<float>("softcap")
                                  .Attr<int32_t>("windowed")
                                  .Ret<ffi::Buffer<ffi::F32>>()   // m
                                  .Ret<ffi::Buffer<ffi::F32>>()   // total
                                  .Ret<ffi::Buffer<ffi::F32>>()); // acc

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxevalPackedAttention, PackedAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // q
                                  .Arg<ffi::Buffer<ffi::F32>>()  // kt
                                  .Arg<ffi::Buffer<ffi::F32>>()  // v
                                  .Arg<ffi::Buffer<ffi::S32>>()  // segment
                                  .Arg<ffi::Buffer<ffi::S32>>()  // parent
                                  .Arg<ffi::Buffer<ffi::S32>>()  // positions
                                  .Arg<ffi::Buffer<ffi::F32>>()  // m0
                                  .Arg<ffi::Buffer<ffi::F32>>()  // total0
                                  .Arg<ffi::Buffer<ffi::F32>>()  // acc0
                                  .Arg<ffi::Buffer<ffi::S32>>()  // window
                                  .Arg<ffi::Buffer<ffi::F32>>()  // scale
                                  .Attr<float>("softcap")
                                  .Attr<int32_t>("windowed")
                                  .Ret<ffi::Buffer<ffi::F32>>()); // out
