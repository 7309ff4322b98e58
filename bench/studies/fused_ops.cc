// Studies, not part of the engine: parts of the int8w8 decoder step as onnxruntime custom operators
// of ours, compiled by bench/studies/fused_linear.py and bench/studies/fused_step.py, which time them
// against the graphs onnxruntime runs now. Large products and attention over many rows are split
// over the session's intra-op threads (onnxruntime's own pool); the rest runs on the calling thread.
//
// FusedLinearInt8(x, w_packed, w_scale, w_colsum, bias) -> y, for float x of shape (..., K):
//   1. each row of x quantized on its own (export/quantize.py): signed rows scale = max(max|x| / 127,
//      1e-30), q = clamp(round_half_even(x / scale) + 128, 0, 255); with attribute unsigned_rows = 1
//      (Relu outputs) scale = max(max x / 255, 1e-30), q = clamp(round_half_even(x / scale), 0, 255);
//   2. the exact integer product sum_k q[k] * w[k][n] with AVX-512 VNNI (vpdpbusd: uint8 x int8
//      into int32), less the zero point's share 128 * sum_k w[k][n] for signed rows (w_colsum);
//   3. y = float(that) * scale * w_scale[n] + bias[n].
// Integer sums are exact and steps 1 and 3 read one row only, so a row's output is the same bits
// whatever else is in the batch, as with the graphs' chain.
//
// FusedDecoderLayerInt8: one decoder layer of the step (training/model.py, DecoderLayer)
// on the step graph's tensors (engine/contract.py): inputs x (B, D), past_k (B, H, Dh, P),
// past_v (B, H, P, Dh), past_mask (B, P), cross_k (C, H, Dh, S), cross_v (C, H, S, Dh), src_mask
// (B, S), norms (6, D: gamma and beta of the three sublayers), then the six products' packed
// weights, scales, column sums and biases concatenated in the order q|k|v (D x 3D), self out,
// cross q, cross out, feed-forward in (D x F), feed-forward out (F x D), and post_norm (bool, 1:
// norms after the residuals, as published, instead of before the sublayers); outputs the new states
// (B, D), the new token's key (B, H, Dh, 1) and value (B, H, 1, Dh), and the cross-attention
// weights averaged over heads (B, S). Row r reads source r / (B / C), as in the graphs.
//
// Packed weights are the (K, N) int8 matrix laid out for vpdpbusd: [N / 16][K / 4][16 columns][4
// rows of K], so one 64-byte load feeds 16 columns x 4 products. K, N and Dh: multiples of 16.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_lite_custom_op.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

namespace {

constexpr float kSignedMax = 127.0f;
constexpr float kUnsignedMax = 255.0f;
constexpr float kZeroPoint = 128.0f;
constexpr float kTinyScale = 1e-30f;
constexpr float kNormEpsilon = 1e-5f;  // torch.nn.LayerNorm's default, as the model's norms
constexpr int kMaxHeadVectors = 8;     // Dh up to 128

// Work split over onnxruntime's intra-op threads (the session's pool; inline when it has one
// thread or the work is small). Each index writes its own outputs, so results do not depend on the
// split: the same bits on one thread or two.
constexpr int64_t kParallelMacs = int64_t{1} << 21;  // below ~2M multiply-adds a product runs inline

struct Pool {
  OrtKernelContext* context;
  void For(size_t n, const std::function<void(size_t)>& fn, bool worth_it) const {
    if (!worth_it || n < 2) {
      for (size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    auto call = [](void* data, size_t i) { (*static_cast<const std::function<void(size_t)>*>(data))(i); };
    Ort::KernelContext(context).ParallelFor(call, n, 0, const_cast<std::function<void(size_t)>*>(&fn));
  }
};

// Quantize one row of K floats (K a multiple of 16) into q; returns the row's scale.
float QuantizeRow(const float* x, int64_t K, bool unsigned_rows, uint8_t* q) {
  __m512 amax = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) {
    const __m512 v = _mm512_loadu_ps(x + k);
    amax = _mm512_max_ps(amax, unsigned_rows ? v : _mm512_abs_ps(v));
  }
  const float range = unsigned_rows ? kUnsignedMax : kSignedMax;
  const float scale = std::max(_mm512_reduce_max_ps(amax) / range, kTinyScale);
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 zero_point = _mm512_set1_ps(unsigned_rows ? 0.0f : kZeroPoint);
  const __m512 lo = _mm512_setzero_ps();
  const __m512 hi = _mm512_set1_ps(kUnsignedMax);
  for (int64_t k = 0; k < K; k += 16) {
    __m512 v = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(x + k), vscale),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, zero_point), lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(v)));
  }
  return scale;
}

// One packed int8 product's tensors, and where its rows of output go.
struct Product {
  const int8_t* w;
  const float* scale;
  const int32_t* colsum;  // null for unsigned rows (zero point 0)
  const float* bias;
  int64_t K, N;
};

// The epilogue of 16 columns of one row: (acc - colsum) * row scale * column scales + bias.
inline void Store(__m512i acc, float row_scale, int64_t col, const Product& p, float* y) {
  if (p.colsum) acc = _mm512_sub_epi32(acc, _mm512_loadu_si512(p.colsum + col));
  const __m512 scaled = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(row_scale)),
                                      _mm512_loadu_ps(p.scale + col));
  _mm512_storeu_ps(y + col, _mm512_add_ps(scaled, _mm512_loadu_ps(p.bias + col)));
}

inline __m512i Broadcast4(const uint8_t* q) {
  int32_t four;
  std::memcpy(&four, q, 4);
  return _mm512_set1_epi32(four);
}

// MR rows (1..4) of quantized x times the columns of 16-column blocks [first, last); rows of y are
// N apart.
template <int MR>
void Rows(const uint8_t* q, const float* row_scale, const Product& p, int64_t first, int64_t last, float* y) {
  const int64_t K = p.K, N = p.N, kc = K / 4, blocks = last;
  int64_t nb = first;
  for (; nb + 4 <= blocks; nb += 4) {
    __m512i acc[MR][4];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_si512();
    const int8_t* base = p.w + nb * kc * 64;
    for (int64_t c = 0; c < kc; ++c) {
      const __m512i w0 = _mm512_loadu_si512(base + c * 64);
      const __m512i w1 = _mm512_loadu_si512(base + (kc + c) * 64);
      const __m512i w2 = _mm512_loadu_si512(base + (2 * kc + c) * 64);
      const __m512i w3 = _mm512_loadu_si512(base + (3 * kc + c) * 64);
      for (int i = 0; i < MR; ++i) {
        const __m512i a = Broadcast4(q + i * K + c * 4);
        acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], a, w0);
        acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], a, w1);
        acc[i][2] = _mm512_dpbusd_epi32(acc[i][2], a, w2);
        acc[i][3] = _mm512_dpbusd_epi32(acc[i][3], a, w3);
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < 4; ++j) Store(acc[i][j], row_scale[i], (nb + j) * 16, p, y + i * N);
  }
  for (; nb < blocks; ++nb) {  // the last 16 to 48 columns
    __m512i acc[MR];
    for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_si512();
    const int8_t* base = p.w + nb * kc * 64;
    for (int64_t c = 0; c < kc; ++c) {
      const __m512i w0 = _mm512_loadu_si512(base + c * 64);
      for (int i = 0; i < MR; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], Broadcast4(q + i * K + c * 4), w0);
    }
    for (int i = 0; i < MR; ++i) Store(acc[i], row_scale[i], nb * 16, p, y + i * N);
  }
}

// y (M x N) = the int8 product of x (M x K); q and scales are scratch. Threads take 64-column
// groups, every row each.
void Linear(const Pool& pool, const float* x, int64_t M, const Product& p, bool unsigned_rows, float* y,
            std::vector<uint8_t>& q, std::vector<float>& scales) {
  const int64_t K = p.K;
  q.resize(static_cast<size_t>(M * K));
  scales.resize(static_cast<size_t>(M));
  for (int64_t r = 0; r < M; ++r) scales[r] = QuantizeRow(x + r * K, K, unsigned_rows, q.data() + r * K);
  const int64_t blocks = p.N / 16, groups = (blocks + 3) / 4;
  pool.For(static_cast<size_t>(groups), [&](size_t g) {
    const int64_t first = static_cast<int64_t>(g) * 4, last = std::min(first + 4, blocks);
    for (int64_t r = 0; r < M; r += 4) {
      const uint8_t* qr = q.data() + r * K;
      const float* sr = scales.data() + r;
      float* yr = y + r * p.N;
      switch (std::min<int64_t>(4, M - r)) {
        case 1: Rows<1>(qr, sr, p, first, last, yr); break;
        case 2: Rows<2>(qr, sr, p, first, last, yr); break;
        case 3: Rows<3>(qr, sr, p, first, last, yr); break;
        default: Rows<4>(qr, sr, p, first, last, yr); break;
      }
    }
  }, M * K * p.N >= kParallelMacs);
}

void LayerNorm(const float* x, int64_t M, int64_t D, const float* gamma, const float* beta, float* y) {
  for (int64_t r = 0; r < M; ++r) {
    const float* xr = x + r * D;
    __m512 sum = _mm512_setzero_ps();
    for (int64_t k = 0; k < D; k += 16) sum = _mm512_add_ps(sum, _mm512_loadu_ps(xr + k));
    const __m512 mean = _mm512_set1_ps(_mm512_reduce_add_ps(sum) / D);
    __m512 sq = _mm512_setzero_ps();
    for (int64_t k = 0; k < D; k += 16) {
      const __m512 c = _mm512_sub_ps(_mm512_loadu_ps(xr + k), mean);
      sq = _mm512_fmadd_ps(c, c, sq);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(_mm512_reduce_add_ps(sq) / D + kNormEpsilon));
    for (int64_t k = 0; k < D; k += 16) {
      const __m512 c = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + k), mean), inv);
      _mm512_storeu_ps(y + r * D + k, _mm512_fmadd_ps(c, _mm512_loadu_ps(gamma + k), _mm512_loadu_ps(beta + k)));
    }
  }
}

// One (row, head): softmax(q . keys / sqrt(Dh)) over the L unmasked positions (and the new
// position's key/value, when new_k is given) times the values. keys (Dh, L), values (L, Dh).
// weights: if given, the probabilities of the L positions are added to it.
void Attend(const float* q, const float* keys, const float* values, const bool* mask, int64_t L, int64_t Dh,
            const float* new_k, const float* new_v, float* ctx, float* weights, float* scores) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  int64_t p = 0;
  for (; p + 16 <= L; p += 16) {
    __m512 s = _mm512_setzero_ps();
    for (int64_t d = 0; d < Dh; ++d) s = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_loadu_ps(keys + d * L + p), s);
    _mm512_storeu_ps(scores + p, _mm512_mul_ps(s, _mm512_set1_ps(scale)));
  }
  for (; p < L; ++p) {
    float s = 0.0f;
    for (int64_t d = 0; d < Dh; ++d) s += q[d] * keys[d * L + p];
    scores[p] = s * scale;
  }
  float own = 0.0f;
  if (new_k) {
    for (int64_t d = 0; d < Dh; ++d) own += q[d] * new_k[d];
    own *= scale;
  }
  float top = new_k ? own : -INFINITY;
  for (int64_t i = 0; i < L; ++i)
    if (mask[i]) top = std::max(top, scores[i]);
  float total = 0.0f;
  for (int64_t i = 0; i < L; ++i) {
    scores[i] = mask[i] ? std::exp(scores[i] - top) : 0.0f;
    total += scores[i];
  }
  const float own_p = new_k ? std::exp(own - top) : 0.0f;
  total += own_p;
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  const int64_t vectors = Dh / 16;
  __m512 acc[kMaxHeadVectors];
  for (int64_t j = 0; j < vectors; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < L; ++i) {
    if (scores[i] == 0.0f) continue;
    const float prob = scores[i] * inv;
    const __m512 pr = _mm512_set1_ps(prob);
    for (int64_t j = 0; j < vectors; ++j)
      acc[j] = _mm512_fmadd_ps(pr, _mm512_loadu_ps(values + i * Dh + 16 * j), acc[j]);
    if (weights) weights[i] += prob;
  }
  if (new_v) {
    const __m512 pr = _mm512_set1_ps(own_p * inv);
    for (int64_t j = 0; j < vectors; ++j) acc[j] = _mm512_fmadd_ps(pr, _mm512_loadu_ps(new_v + 16 * j), acc[j]);
  }
  for (int64_t j = 0; j < vectors; ++j) _mm512_storeu_ps(ctx + 16 * j, acc[j]);
}

void FusedLinearInt8(OrtKernelContext* context, const Ort::Custom::Tensor<float>& x,
                     const Ort::Custom::Tensor<int8_t>& w_packed,
                     const Ort::Custom::Tensor<float>& w_scale, const Ort::Custom::Tensor<int32_t>& w_colsum,
                     const Ort::Custom::Tensor<float>& bias, Ort::Custom::Tensor<float>& y) {
  std::vector<int64_t> shape = x.Shape();
  const int64_t K = shape.back();
  const int64_t N = w_scale.NumberOfElement();
  if (K % 16 != 0 || N % 16 != 0 || w_packed.NumberOfElement() != K * N || w_colsum.NumberOfElement() != N ||
      bias.NumberOfElement() != N)
    ORT_CXX_API_THROW("FusedLinearInt8: K and N must be multiples of 16, the weights K x N", ORT_INVALID_ARGUMENT);
  const int64_t M = K ? x.NumberOfElement() / K : 0;
  shape.back() = N;
  std::vector<uint8_t> q;
  std::vector<float> scales;
  Linear(Pool{context}, x.Data(), M, Product{w_packed.Data(), w_scale.Data(), w_colsum.Data(), bias.Data(), K, N},
         false, y.Allocate(shape), q, scales);
}

void FusedDecoderLayerInt8(OrtKernelContext* context, const Ort::Custom::Tensor<float>& x,
                           const Ort::Custom::Tensor<float>& past_k,
                           const Ort::Custom::Tensor<float>& past_v, const Ort::Custom::Tensor<bool>& past_mask,
                           const Ort::Custom::Tensor<float>& cross_k, const Ort::Custom::Tensor<float>& cross_v,
                           const Ort::Custom::Tensor<bool>& src_mask, const Ort::Custom::Tensor<float>& norms,
                           const Ort::Custom::Tensor<int8_t>& w_packed, const Ort::Custom::Tensor<float>& w_scale,
                           const Ort::Custom::Tensor<int32_t>& w_colsum, const Ort::Custom::Tensor<float>& bias,
                           const Ort::Custom::Tensor<bool>& post_norm, Ort::Custom::Tensor<float>& y,
                           Ort::Custom::Tensor<float>& new_k,
                           Ort::Custom::Tensor<float>& new_v, Ort::Custom::Tensor<float>& cross_weights) {
  const std::vector<int64_t> pk = past_k.Shape(), ck = cross_k.Shape();
  if (pk.size() != 4 || ck.size() != 4)
    ORT_CXX_API_THROW("FusedDecoderLayerInt8: past_k and cross_k must be 4-D", ORT_INVALID_ARGUMENT);
  const int64_t B = pk[0], H = pk[1], Dh = pk[2], P = pk[3], C = ck[0], S = ck[3], D = H * Dh;
  const int64_t F = w_scale.NumberOfElement() - 7 * D;  // columns: 3D + D + D + D + F + D
  const bool sizes = Dh % 16 == 0 && Dh / 16 <= kMaxHeadVectors && F > 0 && F % 16 == 0 && C > 0 && B % C == 0;
  const bool shapes_fit = ck[1] == H && ck[2] == Dh && x.NumberOfElement() == B * D &&
                          past_v.Shape() == std::vector<int64_t>{B, H, P, Dh} &&
                          cross_v.Shape() == std::vector<int64_t>{C, H, S, Dh} &&
                          past_mask.NumberOfElement() == B * P &&
                          src_mask.NumberOfElement() == B * S && norms.NumberOfElement() == 6 * D &&
                          post_norm.NumberOfElement() == 1;
  if (!sizes || !shapes_fit)
    ORT_CXX_API_THROW("FusedDecoderLayerInt8: shapes do not fit the layer", ORT_INVALID_ARGUMENT);
  const int64_t shapes[6][2] = {{D, 3 * D}, {D, D}, {D, D}, {D, D}, {D, F}, {F, D}};
  Product products[6];
  int64_t w_at = 0, n_at = 0;
  for (int i = 0; i < 6; ++i) {
    products[i] = Product{w_packed.Data() + w_at, w_scale.Data() + n_at, w_colsum.Data() + n_at, bias.Data() + n_at,
                          shapes[i][0], shapes[i][1]};
    w_at += shapes[i][0] * shapes[i][1];
    n_at += shapes[i][1];
  }
  products[5].colsum = nullptr;  // the feed-forward's second product reads Relu outputs: unsigned rows
  float* out = y.Allocate({B, D});
  float* nk = new_k.Allocate({B, H, Dh, 1});
  float* nv = new_v.Allocate({B, H, 1, Dh});
  float* cw = cross_weights.Allocate({B, S});
  const float* xs = x.Data();
  const float* ln = norms.Data();
  std::vector<uint8_t> q;
  std::vector<float> scales;
  std::vector<float> h(B * D), qkv(B * 3 * D), ctx(B * D), t(B * D), x1(B * D), ff(B * F);
  const Pool pool{context};
  const int64_t stride = std::max(P, S) + 16;  // each row its own scores: rows may run on different threads
  std::vector<float> scores(static_cast<size_t>(B * stride));

  // Pre-norm: x + sublayer(norm(x)); post-norm (as published): norm(x + sublayer(x)).
  const bool post = post_norm.Data()[0];
  auto before = [&](const float* in, int sublayer) -> const float* {
    if (post) return in;
    LayerNorm(in, B, D, ln + 2 * sublayer * D, ln + (2 * sublayer + 1) * D, h.data());
    return h.data();
  };
  auto after = [&](float* in_place, int sublayer) {
    if (post) LayerNorm(in_place, B, D, ln + 2 * sublayer * D, ln + (2 * sublayer + 1) * D, in_place);
  };

  Linear(pool, before(xs, 0), B, products[0], false, qkv.data(), q, scales);  // self-attention: cache + new token
  pool.For(static_cast<size_t>(B), [&](size_t row_index) {
    const int64_t r = static_cast<int64_t>(row_index);
    for (int64_t hd = 0; hd < H; ++hd) {
      const float* row = qkv.data() + r * 3 * D + hd * Dh;
      std::memcpy(nk + (r * H + hd) * Dh, row + D, Dh * sizeof(float));
      std::memcpy(nv + (r * H + hd) * Dh, row + 2 * D, Dh * sizeof(float));
      Attend(row, past_k.Data() + (r * H + hd) * Dh * P, past_v.Data() + (r * H + hd) * P * Dh,
             past_mask.Data() + r * P, P, Dh, row + D, row + 2 * D, ctx.data() + r * D + hd * Dh, nullptr,
             scores.data() + r * stride);
    }
  }, 2 * B * D * (P + 1) >= kParallelMacs);
  Linear(pool, ctx.data(), B, products[1], false, t.data(), q, scales);
  for (int64_t i = 0; i < B * D; ++i) x1[i] = xs[i] + t[i];
  after(x1.data(), 0);

  Linear(pool, before(x1.data(), 1), B, products[2], false, t.data(), q, scales);  // cross-attention
  std::fill(cw, cw + B * S, 0.0f);
  pool.For(static_cast<size_t>(B), [&](size_t row_index) {
    const int64_t r = static_cast<int64_t>(row_index), src = r / (B / C);
    for (int64_t hd = 0; hd < H; ++hd)
      Attend(t.data() + r * D + hd * Dh, cross_k.Data() + (src * H + hd) * Dh * S,
             cross_v.Data() + (src * H + hd) * S * Dh, src_mask.Data() + r * S, S, Dh, nullptr, nullptr,
             ctx.data() + r * D + hd * Dh, cw + r * S, scores.data() + r * stride);
  }, 2 * B * D * S >= kParallelMacs);
  for (int64_t i = 0; i < B * S; ++i) cw[i] /= static_cast<float>(H);
  Linear(pool, ctx.data(), B, products[3], false, t.data(), q, scales);
  for (int64_t i = 0; i < B * D; ++i) x1[i] += t[i];
  after(x1.data(), 1);

  Linear(pool, before(x1.data(), 2), B, products[4], false, ff.data(), q, scales);  // feed-forward
  for (float& v : ff) v = std::max(v, 0.0f);
  Linear(pool, ff.data(), B, products[5], true, t.data(), q, scales);
  for (int64_t i = 0; i < B * D; ++i) out[i] = x1[i] + t[i];
  after(out, 2);
}

// One operator object each for the library's lifetime: every session that registers the library
// points at them, so they must outlive them all.
std::unique_ptr<Ort::Custom::OrtLiteCustomOp> g_linear, g_layer;

}  // namespace

extern "C" OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  Ort::InitApi(api_base->GetApi(ORT_API_VERSION));
  static Ort::CustomOpDomain domain{"nmt.study"};
  if (!g_linear) {
    g_linear.reset(Ort::Custom::CreateLiteCustomOp("FusedLinearInt8", "CPUExecutionProvider", FusedLinearInt8));
    g_layer.reset(
        Ort::Custom::CreateLiteCustomOp("FusedDecoderLayerInt8", "CPUExecutionProvider", FusedDecoderLayerInt8));
    domain.Add(g_linear.get());
    domain.Add(g_layer.get());
  }
  Ort::UnownedSessionOptions(options).Add(domain);
  return nullptr;
}
