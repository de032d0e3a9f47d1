// Decode attention over one layer of the stacked KV cache, fused, for XLA:CPU (an FFI custom call).
//
// The Python side (`jaxeval/models/cpu_attention.py`) builds this file once per machine and calls
// it from `attention.cache_attend` for decode steps (T = 1) on the CPU. It returns the online-softmax
// state over the cache slots that `cache_attend`'s block loop would return, and the caller folds
// the step's own key in exactly as before. Shapes (one kv head g of row b is one task):
//
//   q        [B, G, M, E]   float32   the X query heads of a kv head (M = X, T = 1)
//   k        [L, B, G, E, C] float32  keys, slots minor (decoder.KVCache)
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
constexpr int64_t kSlotBlock = 128;  // V rows per pass (32 KB at E = 64: stays in L1)

// s[i, j] = q[i] . k[:, j] for MB queries (q [MB, E]) and slots [0, n) of k [E, C] (slots
// minor): each of k's E rows is streamed once, in order, into the [MB, n8] scores (in L1).
template <int MB>
void Scores(const float* q, int64_t E, const float* k, int64_t C, int64_t n, float* s,
            int64_t stride) {
  const int64_t n8 = n / kW * kW;
  for (int i = 0; i < MB; ++i) std::fill(s + i * stride, s + i * stride + n, 0.0f);
  for (int64_t d = 0; d < E; ++d) {
    const float* kd = k + d * C;
    V8 qd[MB];
    for (int i = 0; i < MB; ++i) qd[i] = Splat(q[i * E + d]);
    for (int64_t j = 0; j < n8; j += kW) {
      __builtin_prefetch(kd + C + j);  // the next row's same slots: E short streams, one at a time
      const V8 kj = Load(kd + j);
      for (int i = 0; i < MB; ++i) Store(s + i * stride + j, Load(s + i * stride + j) + qd[i] * kj);
    }
    for (int64_t j = n8; j < n; ++j) {
      for (int i = 0; i < MB; ++i) s[i * stride + j] += q[i * E + d] * kd[j];
    }
  }
}

// out[i, :] += sum_j w[i, j] v[j, :] for MB queries (w [MB, stride]) over slots [j0, j1) of v
// [C, E], 16 features at a time in registers.
template <int MB>
void Values(const float* w, int64_t stride, const float* v, int64_t E, int64_t j0, int64_t j1,
            float* out) {
  int64_t e0 = 0;
  for (; e0 + 2 * kW <= E; e0 += 2 * kW) {
    V8 a[MB][2];
    for (int i = 0; i < MB; ++i) {
      a[i][0] = Load(out + i * E + e0);
      a[i][1] = Load(out + i * E + e0 + kW);
    }
    for (int64_t j = j0; j < j1; ++j) {
      const V8 v0 = Load(v + j * E + e0), v1 = Load(v + j * E + e0 + kW);
      for (int i = 0; i < MB; ++i) {
        const V8 wij = Splat(w[i * stride + j]);
        a[i][0] += wij * v0;
        a[i][1] += wij * v1;
      }
    }
    for (int i = 0; i < MB; ++i) {
      Store(out + i * E + e0, a[i][0]);
      Store(out + i * E + e0 + kW, a[i][1]);
    }
  }
  for (; e0 < E; ++e0) {
    for (int i = 0; i < MB; ++i) {
      float acc = out[i * E + e0];
      for (int64_t j = j0; j < j1; ++j) acc += w[i * stride + j] * v[j * E + e0];
      out[i * E + e0] = acc;
    }
  }
}

// f(std::integral_constant<int, MB>, i0) for the queries [i0, i0 + MB) in groups of up to kGroup,
// so that each group's register block has a size known at compile time.
template <class F>
void ForGroups(int64_t M, F&& f) {
  for (int64_t i0 = 0; i0 < M; i0 += kGroup) {
    switch (std::min<int64_t>(kGroup, M - i0)) {
      case 1: f(std::integral_constant<int, 1>{}, i0); break;
      case 2: f(std::integral_constant<int, 2>{}, i0); break;
      default: f(std::integral_constant<int, 3>{}, i0); break;
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
  ForGroups(M, [&](auto mb, int64_t i0) { Scores<mb>(q + i0 * E, E, k, C, n, s + i0 * n, n); });
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
  ForGroups(M, [&](auto mb, int64_t i0) {
    for (int64_t j0 = 0; j0 < n; j0 += kSlotBlock) {
      Values<mb>(s + i0 * n, n, v, E, j0, std::min(n, j0 + kSlotBlock), acc + i0 * E);
    }
  });
}

// Tasks handed out by an atomic counter to the calling thread and to pool helpers; the caller
// waits for the last one. Helpers hold the state by shared_ptr, so one that starts after the call
// returned finds no task and touches nothing else.
struct Shared {
  Problem problem;
  int64_t tasks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable cv;
};

void Work(Shared* sh) {
  std::vector<float> scratch;
  int64_t mine = 0;
  for (int64_t t; (t = sh->next.fetch_add(1)) < sh->tasks; ++mine) AttendOne(sh->problem, t, scratch);
  if (mine && sh->done.fetch_add(mine) + mine == sh->tasks) {
    std::lock_guard<std::mutex> lock(sh->mu);
    sh->cv.notify_all();
  }
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
  auto sh = std::make_shared<Shared>();
  const int64_t slab = B * G * E * C;
  sh->problem = Problem{q.typed_data(), k.typed_data() + l * slab, v.typed_data() + l * slab,
                        bound.typed_data(), valid.typed_data(), slot_pos.typed_data(),
                        q_pos.typed_data(), G, M, E, C, scale.typed_data()[0], softcap,
                        window.typed_data()[0], windowed != 0, m_out->typed_data(),
                        total_out->typed_data(), acc_out->typed_data()};
  sh->tasks = B * G;
  if (sh->tasks == 0) return ffi::Error::Success();
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), sh->tasks - 1);
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([sh] { Work(sh.get()); });
  Work(sh.get());
  std::unique_lock<std::mutex> lock(sh->mu);
  sh->cv.wait(lock, [&] { return sh->done.load() == sh->tasks; });
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
