// Attention training (layers/attention_backward.hpp): a forward that also saves each query row's
// log-sum-exp, and a flash-style backward that recomputes the probabilities from Q, K and that LSE, so the
// Sq x Skv score matrix never reaches global memory.
//   attn_train_fwd   one work-item per query row: online softmax over the keys, Y and LSE = m + log(l)
//   attn_bwd_dq      one work-item per query row: Delta = rowsum(dO * O) (saved for attn_bwd_dkv), then
//                    dQ = scale * sum_j P_ij (dO_i . V_j - Delta_i) K_j
//   attn_bwd_dkv     one work-item per key row (of a kv head): over the query rows of every q head of its
//                    group, dV_j = sum_i P_ij dO_i and dK_j = scale * sum_i P_ij (dO_i . V_j - Delta_i) Q_i
// P_ij = exp(s_ij - LSE_i), s_ij = scale * Q_i . K_j + mask_ij (masked: -inf, P = 0). A row whose every key is
// masked has LSE = -inf, Y = 0 (as the inference kernels) and no gradient. Everything accumulates in f32.
// Compile-time: HEAD_DIM (D), HEAD_DIM_V (Dv), MASK 0 none / 1 additive float / 2 boolean (uchar, nonzero =
// attend). Strides in elements: b, h, s of each tensor (the ONNX 3-D layout [B, S, H*D] and the 4-D one
// [B, H, S, D] are both strided views); LSE and Delta are [B, Hq, Sq].

#ifndef MASK
#define MASK 0
#endif

typedef struct {
  int Sq, Skv, q_heads, group, causal, causal_offset, mask_cols, pad0;
  long mask_sb, mask_sh, mask_ss;
  float scale, pad1;
} attn_bwd_params;

// The score of query row `row` (of batch b, q head h) against key `col` from the raw dot product, or -inf.
inline float attn_bwd_score(const attn_bwd_params* p, float dot, int b, int h, int row, int col,
                            __global const void* mask, long mask_off) {
  float s = dot * p->scale;
  bool ok = !p->causal || col <= row + p->causal_offset;
#if MASK == 1
  const long mi = mask_off + b * p->mask_sb + h * p->mask_sh + (long)row * p->mask_ss + col;
  if (col < p->mask_cols) s += ((__global const float*)mask)[mi];
  else ok = false;
#elif MASK == 2
  const long mi = mask_off + b * p->mask_sb + h * p->mask_sh + (long)row * p->mask_ss + col;
  ok = ok && col < p->mask_cols && ((__global const uchar*)mask)[mi] != 0;
#else
  (void)b, (void)h, (void)mask, (void)mask_off;
#endif
  return ok ? s : -INFINITY;
}

__kernel void attn_train_fwd(const attn_bwd_params p, __global const float* Q, long qo, long qb, long qh, long qs,
                             __global const float* K, long ko, long kb, long kh, long ks, __global const float* V,
                             long vo, long vb, long vh, long vs, __global float* Y, long yo, long yb, long yh, long ys,
                             __global float* L, long lo, __global const void* mask, long mask_off) {
  const int i = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
  if (i >= p.Sq) return;
  const int hk = h / p.group;
  __global const float* q = Q + qo + b * qb + h * qh + (long)i * qs;
  float qv[HEAD_DIM], acc[HEAD_DIM_V];
  for (int c = 0; c < HEAD_DIM; ++c) qv[c] = q[c];
  for (int c = 0; c < HEAD_DIM_V; ++c) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int end = p.causal ? min(p.Skv, i + p.causal_offset + 1) : p.Skv;
  for (int j = 0; j < end; ++j) {
    __global const float* k = K + ko + b * kb + hk * kh + (long)j * ks;
    float dot = 0.0f;
    for (int c = 0; c < HEAD_DIM; ++c) dot = fma(qv[c], k[c], dot);
    const float s = attn_bwd_score(&p, dot, b, h, i, j, mask, mask_off);
    if (s == -INFINITY) continue;
    const float m_new = fmax(m, s), corr = exp(m - m_new), e = exp(s - m_new);
    __global const float* v = V + vo + b * vb + hk * vh + (long)j * vs;
    l = l * corr + e;
    for (int c = 0; c < HEAD_DIM_V; ++c) acc[c] = fma(e, v[c], acc[c] * corr);
    m = m_new;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  __global float* y = Y + yo + b * yb + h * yh + (long)i * ys;
  for (int c = 0; c < HEAD_DIM_V; ++c) y[c] = acc[c] * inv;
  L[lo + ((long)b * p.q_heads + h) * p.Sq + i] = l > 0.0f ? m + log(l) : -INFINITY;
}

__kernel void attn_bwd_dq(const attn_bwd_params p, __global const float* Q, long qo, long qb, long qh, long qs,
                          __global const float* K, long ko, long kb, long kh, long ks, __global const float* V, long vo,
                          long vb, long vh, long vs, __global const float* O, long oo, long ob, long oh, long os,
                          __global const float* dO, long doo, __global const float* L, long lo, __global float* Delta,
                          long deo, __global float* dQ, long dqo, __global const void* mask, long mask_off) {
  const int i = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
  if (i >= p.Sq) return;
  const int hk = h / p.group;
  const long row = ((long)b * p.q_heads + h) * p.Sq + i;
  const long orow = b * ob + h * oh + (long)i * os;  // O and dO share Y's layout
  __global const float* o = O + oo + orow;
  __global const float* g = dO + doo + orow;
  float gv[HEAD_DIM_V], qv[HEAD_DIM], dq[HEAD_DIM];
  float delta = 0.0f;
  for (int c = 0; c < HEAD_DIM_V; ++c) {
    gv[c] = g[c];
    delta = fma(gv[c], o[c], delta);
  }
  Delta[deo + row] = delta;
  __global const float* q = Q + qo + b * qb + h * qh + (long)i * qs;
  for (int c = 0; c < HEAD_DIM; ++c) qv[c] = q[c], dq[c] = 0.0f;
  const float lse = L[lo + row];
  const int end = lse == -INFINITY ? 0 : p.causal ? min(p.Skv, i + p.causal_offset + 1) : p.Skv;
  for (int j = 0; j < end; ++j) {
    __global const float* k = K + ko + b * kb + hk * kh + (long)j * ks;
    float dot = 0.0f;
    for (int c = 0; c < HEAD_DIM; ++c) dot = fma(qv[c], k[c], dot);
    const float s = attn_bwd_score(&p, dot, b, h, i, j, mask, mask_off);
    if (s == -INFINITY) continue;
    const float pr = exp(s - lse);
    __global const float* v = V + vo + b * vb + hk * vh + (long)j * vs;
    float dp = 0.0f;
    for (int c = 0; c < HEAD_DIM_V; ++c) dp = fma(gv[c], v[c], dp);
    const float ds = pr * (dp - delta);
    for (int c = 0; c < HEAD_DIM; ++c) dq[c] = fma(ds, k[c], dq[c]);
  }
  __global float* out = dQ + dqo + b * qb + h * qh + (long)i * qs;
  for (int c = 0; c < HEAD_DIM; ++c) out[c] = dq[c] * p.scale;
}

__kernel void attn_bwd_dkv(const attn_bwd_params p, __global const float* Q, long qo, long qb, long qh, long qs,
                           __global const float* K, long ko, long kb, long kh, long ks, __global const float* V,
                           long vo, long vb, long vh, long vs, long ob, long oh, long os, __global const float* dO,
                           long doo, __global const float* L, long lo, __global const float* Delta, long deo,
                           __global float* dK, long dko, __global float* dV, long dvo, __global const void* mask,
                           long mask_off) {
  const int j = get_global_id(0), hk = get_global_id(1), b = get_global_id(2);
  if (j >= p.Skv) return;
  float kv[HEAD_DIM], vv[HEAD_DIM_V], dk[HEAD_DIM], dv[HEAD_DIM_V];
  __global const float* k = K + ko + b * kb + hk * kh + (long)j * ks;
  __global const float* v = V + vo + b * vb + hk * vh + (long)j * vs;
  for (int c = 0; c < HEAD_DIM; ++c) kv[c] = k[c], dk[c] = 0.0f;
  for (int c = 0; c < HEAD_DIM_V; ++c) vv[c] = v[c], dv[c] = 0.0f;
  // Causal: row i sees key j when j <= i + offset, so the rows from j - offset on.
  const int first = p.causal ? max(0, j - p.causal_offset) : 0;
  for (int hg = 0; hg < p.group; ++hg) {
    const int h = hk * p.group + hg;
    for (int i = first; i < p.Sq; ++i) {
      const long row = ((long)b * p.q_heads + h) * p.Sq + i;
      const float lse = L[lo + row];
      if (lse == -INFINITY) continue;
      __global const float* q = Q + qo + b * qb + h * qh + (long)i * qs;
      float dot = 0.0f;
      for (int c = 0; c < HEAD_DIM; ++c) dot = fma(q[c], kv[c], dot);
      const float s = attn_bwd_score(&p, dot, b, h, i, j, mask, mask_off);
      if (s == -INFINITY) continue;
      const float pr = exp(s - lse);
      __global const float* g = dO + doo + b * ob + h * oh + (long)i * os;
      float dp = 0.0f;
      for (int c = 0; c < HEAD_DIM_V; ++c) {
        dp = fma(g[c], vv[c], dp);
        dv[c] = fma(pr, g[c], dv[c]);
      }
      const float ds = pr * (dp - Delta[deo + row]);
      for (int c = 0; c < HEAD_DIM; ++c) dk[c] = fma(ds, q[c], dk[c]);
    }
  }
  __global float* ok = dK + dko + b * kb + hk * kh + (long)j * ks;
  __global float* ov = dV + dvo + b * vb + hk * vh + (long)j * vs;
  for (int c = 0; c < HEAD_DIM; ++c) ok[c] = dk[c] * p.scale;
  for (int c = 0; c < HEAD_DIM_V; ++c) ov[c] = dv[c];
}
