// A study, not part of the engine: one linear layer of the int8w8 graphs as a single onnxruntime
// custom operator (bench/studies/fused_linear.py builds it and times it against the graphs' chain).
//
// FusedLinearInt8(x, w_packed, w_scale, w_colsum, bias) -> y, for float x of shape (..., K):
//   1. each row of x quantized on its own: scale = max(max|x| / 127, 1e-30),
//      q = clamp(round_half_even(x / scale) + 128, 0, 255) (export/quantize.py's signed rows);
//   2. the exact integer product sum_k q[k] * w[k][n] with AVX-512 VNNI (vpdpbusd: uint8 x int8
//      into int32), less the zero point's share 128 * sum_k w[k][n] (w_colsum, precomputed);
//   3. y = float(that) * scale * w_scale[n] + bias[n].
// Integer sums are exact and steps 1 and 3 read one row only, so a row's output is the same bits
// whatever else is in the batch, as with the graphs' chain.
//
// w_packed is the (K, N) int8 weight laid out for vpdpbusd: [N / 16][K / 4][16 columns][4 rows of
// K], so one 64-byte load feeds 16 columns x 4 products. K must be a multiple of 16, N of 16.
// Rows go four at a time and columns 64 at a time (16 accumulators in registers). One thread.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_lite_custom_op.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

namespace {

constexpr float kInvSignedMax = 1.0f / 127.0f;
constexpr float kTinyScale = 1e-30f;

// Quantize one row of K floats (K a multiple of 16) into q; returns the row's scale.
float QuantizeRow(const float* x, int64_t K, uint8_t* q) {
  __m512 amax = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  const float scale = std::max(_mm512_reduce_max_ps(amax) * kInvSignedMax, kTinyScale);
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 zero_point = _mm512_set1_ps(128.0f);
  const __m512 lo = _mm512_setzero_ps();
  const __m512 hi = _mm512_set1_ps(255.0f);
  for (int64_t k = 0; k < K; k += 16) {
    __m512 v = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(x + k), vscale),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, zero_point), lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(v)));
  }
  return scale;
}

// The epilogue of 16 columns of one row: (acc - colsum) * row scale * column scales + bias.
inline void Store(__m512i acc, float row_scale, int64_t col, const int32_t* colsum, const float* w_scale,
                  const float* bias, float* y) {
  const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, _mm512_loadu_si512(colsum + col)));
  const __m512 scaled = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(row_scale)), _mm512_loadu_ps(w_scale + col));
  _mm512_storeu_ps(y + col, _mm512_add_ps(scaled, _mm512_loadu_ps(bias + col)));
}

// MR rows (1..4) of quantized x times every column.
template <int MR>
void Rows(const uint8_t* q, const float* row_scale, int64_t K, int64_t N, const int8_t* w, const int32_t* colsum,
          const float* w_scale, const float* bias, float* y) {
  const int64_t kc = K / 4, blocks = N / 16;
  int64_t nb = 0;
  for (; nb + 4 <= blocks; nb += 4) {
    __m512i acc[MR][4];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_si512();
    const int8_t* base = w + nb * kc * 64;
    for (int64_t c = 0; c < kc; ++c) {
      const __m512i w0 = _mm512_loadu_si512(base + c * 64);
      const __m512i w1 = _mm512_loadu_si512(base + (kc + c) * 64);
      const __m512i w2 = _mm512_loadu_si512(base + (2 * kc + c) * 64);
      const __m512i w3 = _mm512_loadu_si512(base + (3 * kc + c) * 64);
      for (int i = 0; i < MR; ++i) {
        int32_t four;
        std::copy_n(q + i * K + c * 4, 4, reinterpret_cast<uint8_t*>(&four));
        const __m512i a = _mm512_set1_epi32(four);
        acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], a, w0);
        acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], a, w1);
        acc[i][2] = _mm512_dpbusd_epi32(acc[i][2], a, w2);
        acc[i][3] = _mm512_dpbusd_epi32(acc[i][3], a, w3);
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < 4; ++j) Store(acc[i][j], row_scale[i], (nb + j) * 16, colsum, w_scale, bias, y + i * N);
  }
  for (; nb < blocks; ++nb) {  // the last 16 to 48 columns
    __m512i acc[MR];
    for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_si512();
    const int8_t* base = w + nb * kc * 64;
    for (int64_t c = 0; c < kc; ++c) {
      const __m512i w0 = _mm512_loadu_si512(base + c * 64);
      for (int i = 0; i < MR; ++i) {
        int32_t four;
        std::copy_n(q + i * K + c * 4, 4, reinterpret_cast<uint8_t*>(&four));
        acc[i] = _mm512_dpbusd_epi32(acc[i], _mm512_set1_epi32(four), w0);
      }
    }
    for (int i = 0; i < MR; ++i) Store(acc[i], row_scale[i], nb * 16, colsum, w_scale, bias, y + i * N);
  }
}

void FusedLinearInt8(const Ort::Custom::Tensor<float>& x, const Ort::Custom::Tensor<int8_t>& w_packed,
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
  float* out = y.Allocate(shape);
  std::vector<uint8_t> q(static_cast<size_t>(M * K));
  std::vector<float> row_scale(static_cast<size_t>(M));
  for (int64_t r = 0; r < M; ++r) row_scale[r] = QuantizeRow(x.Data() + r * K, K, q.data() + r * K);
  const int8_t* w = w_packed.Data();
  for (int64_t r = 0; r < M; r += 4) {
    const uint8_t* qr = q.data() + r * K;
    const float* sr = row_scale.data() + r;
    float* yr = out + r * N;
    switch (std::min<int64_t>(4, M - r)) {
      case 1: Rows<1>(qr, sr, K, N, w, w_colsum.Data(), w_scale.Data(), bias.Data(), yr); break;
      case 2: Rows<2>(qr, sr, K, N, w, w_colsum.Data(), w_scale.Data(), bias.Data(), yr); break;
      case 3: Rows<3>(qr, sr, K, N, w, w_colsum.Data(), w_scale.Data(), bias.Data(), yr); break;
      default: Rows<4>(qr, sr, K, N, w, w_colsum.Data(), w_scale.Data(), bias.Data(), yr); break;
    }
  }
}

// One operator object for the library's lifetime: every session that registers the library
// points at it, so it must outlive them all.
std::unique_ptr<Ort::Custom::OrtLiteCustomOp> g_op;

}  // namespace

extern "C" OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  Ort::InitApi(api_base->GetApi(ORT_API_VERSION));
  if (!g_op) g_op.reset(Ort::Custom::CreateLiteCustomOp("FusedLinearInt8", "CPUExecutionProvider", FusedLinearInt8));
  static Ort::CustomOpDomain domain{"nmt.study"};
  static bool added = false;
  if (!added) {
    domain.Add(g_op.get());
    added = true;
  }
  Ort::UnownedSessionOptions(options).Add(domain);
  return nullptr;
}
