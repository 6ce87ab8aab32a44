// Scaled-dot-product attention: the fused kernel (K/V tiles through local memory, online softmax, the
// Sq x Skv score matrix never stored), its CPU twin attention_blocked (register-blocked rows x keys,
// K packed first; see its section), the row softmax of the plain path (scores in memory, GEMMs in
// gemm.cl) and the KV-cache append.
//
// Macros (defaults correct on any device):
//   HEAD_DIM, HEAD_DIM_V  head sizes of Q/K and of V (compile-time so the per-row arrays live in
//                          registers / private memory and the loops unroll)
//   BLOCK_M               query rows per work-group (= work-group size, one row per work-item)
//   BLOCK_N               keys per local-memory tile
//   MASK                  0 none, 1 additive float mask, 2 boolean mask (uchar, nonzero = attend)
//   USE_LOCAL             1: K/V tiles staged in local memory (GPUs); 0: read straight from global memory,
//                          no barriers (CPUs, where a group's work-items run one after another and the
//                          tile stays in cache anyway)
//   KV_LENS               0 none, 1 int32 per-batch kv lengths, 2 int64 per-batch kv lengths
//   VEC                   1, 2, 4, 8 or 16: vector width along the head dimension (must divide HEAD_DIM
//                          and HEAD_DIM_V); CPUs need it, the work-items of a group are not SIMD lanes there
//
// Index conventions: every tensor is addressed as base + b*sb + h*sh + s*ss + d (d contiguous), so the
// same kernel serves [B, H, S, D], the ONNX 3-D [B, S, H*D] layout and a KV cache [B, H, max_len, D].
// Masking follows ONNX Attention: score = softcap(scale * q.k) + mask; causal keeps j <= i + offset.

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM
#endif
#ifndef BLOCK_M
#define BLOCK_M 32
#endif
#ifndef BLOCK_N
#define BLOCK_N 32
#endif
#ifndef MASK
#define MASK 0
#endif
#ifndef USE_LOCAL
#define USE_LOCAL 1
#endif
#ifndef KV_LENS
#define KV_LENS 0
#endif

#ifndef VEC
#define VEC 1
#endif
#if HEAD_DIM % VEC != 0 || HEAD_DIM_V % VEC != 0
#error "VEC must divide HEAD_DIM and HEAD_DIM_V"
#endif
#define DK_VEC (HEAD_DIM / VEC)
#define DV_VEC (HEAD_DIM_V / VEC)
#if VEC == 1
typedef float vec_t;
#define VLOAD(i, p) ((p)[i])
#define VSUM(x) (x)
#elif VEC == 2
typedef float2 vec_t;
#define VLOAD(i, p) vload2((i), (p))
#define VSUM(x) ((x).s0 + (x).s1)
#elif VEC == 4
typedef float4 vec_t;
#define VLOAD(i, p) vload4((i), (p))
#define VSUM(x) (((x).s0 + (x).s1) + ((x).s2 + (x).s3))
#elif VEC == 8
typedef float8 vec_t;
#define VLOAD(i, p) vload8((i), (p))
#define VSUM(x) ((((x).s0 + (x).s1) + ((x).s2 + (x).s3)) + (((x).s4 + (x).s5) + ((x).s6 + (x).s7)))
#elif VEC == 16
typedef float16 vec_t;
#define VLOAD(i, p) vload16((i), (p))
#define VSUM(x)                                                                                         \
  (((((x).s0 + (x).s1) + ((x).s2 + (x).s3)) + (((x).s4 + (x).s5) + ((x).s6 + (x).s7))) +                 \
   ((((x).s8 + (x).s9) + ((x).sa + (x).sb)) + (((x).sc + (x).sd) + ((x).se + (x).sf))))
#else
#error "VEC must be 1, 2, 4, 8 or 16"
#endif

#define VSTORE_(n) vstore##n
#define VSTORE(n) VSTORE_(n)
#define CAT_VSTORE(x, i, p) VSTORE(VEC)((x), (i), (p))

// ATT_KERNEL picks the kernels one program holds, so a variant builds only what it runs (PoCL compiles
// each kernel of a program): 0 all, 1 attention_fused, 2 attention_blocked + attention_pack_k,
// 3 the plain path's kernels and the KV-cache append.
#ifndef ATT_KERNEL
#define ATT_KERNEL 0
#endif

#if KV_LENS == 2
typedef long lens_t;
#else
typedef int lens_t;
#endif

// Shape and masking parameters shared by both paths (passed by value as one struct keeps the argument
// list short and identical between kernels).
typedef struct {
  int Sq, Skv;            // query rows; key columns the computation may look at (cache: its capacity)
  int q_heads, group;     // Hq and Hq / Hkv
  int causal;             // 0 / 1
  int causal_from_lens;   // causal offset per batch = kv_len[b] - Sq (ONNX external cache)
  int causal_offset;      // otherwise this offset
  int mask_cols;          // columns of the mask (ONNX pads shorter masks with -inf / false)
  long mask_sb, mask_sh, mask_ss;  // mask strides (0 = broadcast)
  float scale, softcap;
} attn_params;

inline int attn_kv_end(const attn_params* p, __global const lens_t* lens, int b) {
#if KV_LENS
  return min(p->Skv, (int)lens[b]);
#else
  (void)lens;
  (void)b;
  return p->Skv;
#endif
}

inline int attn_causal_offset(const attn_params* p, int kv_end) {
  return p->causal_from_lens ? kv_end - p->Sq : p->causal_offset;
}

// Applies softcap, the mask, causality and the kv length to one raw (unscaled) dot product.
inline float attn_fix_score(const attn_params* p, float dot, int row, int col, int kv_end, int coff,
                            __global const float* mask_row_f, __global const uchar* mask_row_b) {
  float s = dot * p->scale;
  if (p->softcap > 0.0f) s = p->softcap * tanh(s / p->softcap);
  bool ok = col < kv_end && (!p->causal || col <= row + coff);
#if MASK == 1
  (void)mask_row_b;
  if (col < p->mask_cols) s += mask_row_f[col];
  else ok = false;
#elif MASK == 2
  (void)mask_row_f;
  ok = ok && col < p->mask_cols && mask_row_b[col] != 0;
#else
  (void)mask_row_f;
  (void)mask_row_b;
#endif
  return ok ? s : -INFINITY;
}

#if ATT_KERNEL == 0 || ATT_KERNEL == 1
// One work-item per query row. The rows of a work-group are (head-in-group, position) pairs of one KV
// head, r = g * Sq + s, so with grouped-query heads every q head of the group shares each K/V tile and a
// decode step (Sq = 1) reads its KV head once. Global size (round_up(group * Sq, BLOCK_M), Hkv, B).
__kernel __attribute__((reqd_work_group_size(BLOCK_M, 1, 1))) void attention_fused(
    attn_params p, __global const float* Q, long q_off, long q_sb, long q_sh, long q_ss,
    __global const float* K, long k_off, long k_sb, long k_sh, long k_ss, __global const float* V, long v_off,
    long v_sb, long v_sh, long v_ss, __global float* O, long o_off, long o_sb, long o_sh, long o_ss,
    __global const void* mask, long mask_off, __global const lens_t* lens, long lens_off) {
#if USE_LOCAL
  __local vec_t Ks[BLOCK_N][DK_VEC];
  __local vec_t Vs[BLOCK_N][DV_VEC];
#define K_AT(j, d) Ks[j][d]
#define V_AT(j, d) Vs[j][d]
#else
#define K_AT(j, d) VLOAD(d, kt + (long)(j) * k_ss)
#define V_AT(j, d) VLOAD(d, vt + (long)(j) * v_ss)
#endif
  const int lid = get_local_id(0);
  const int rows = p.group * p.Sq;
  const int r0 = get_group_id(0) * BLOCK_M;
  const int r = min(r0 + lid, rows - 1);
  const bool active = r0 + lid < rows;
  const int hk = get_global_id(1);
  const int b = get_global_id(2);
  const int h = hk * p.group + r / p.Sq;
  const int row = r % p.Sq;
  lens += lens_off;
  const int kv_end = attn_kv_end(&p, lens, b);
  const int coff = attn_causal_offset(&p, kv_end);
  // Keys this work-group needs: causality bounds them by its last query position.
  const int r_last = min(r0 + BLOCK_M, rows) - 1;
  const int s_max = (r0 / p.Sq != r_last / p.Sq) ? p.Sq - 1 : r_last % p.Sq;
  int kv_limit = kv_end;
  if (p.causal) kv_limit = min(kv_limit, s_max + coff + 1);
  kv_limit = max(kv_limit, 0);

  __global const float* mrow_f = 0;
  __global const uchar* mrow_b = 0;
  const long mrow = mask_off + b * p.mask_sb + h * p.mask_sh + (long)row * p.mask_ss;
#if MASK == 1
  mrow_f = (__global const float*)mask + mrow;
#elif MASK == 2
  mrow_b = (__global const uchar*)mask + mrow;
#else
  (void)mask;
  (void)mrow;
#endif

  vec_t q[DK_VEC];
  vec_t acc[DV_VEC];
  const __global float* qp = Q + q_off + b * q_sb + h * q_sh + (long)row * q_ss;
  for (int d = 0; d < DK_VEC; ++d) q[d] = VLOAD(d, qp);
  for (int d = 0; d < DV_VEC; ++d) acc[d] = (vec_t)0.0f;
  float m = -INFINITY, l = 0.0f;

  const __global float* kb = K + k_off + b * k_sb + hk * k_sh;
  const __global float* vb = V + v_off + b * v_sb + hk * v_sh;
  for (int kv0 = 0; kv0 < kv_limit; kv0 += BLOCK_N) {
    const int n = min(BLOCK_N, kv_limit - kv0);
#if USE_LOCAL
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous tile is no longer read
    for (int e = lid; e < BLOCK_N * DK_VEC; e += BLOCK_M) {
      const int j = e / DK_VEC, d = e % DK_VEC;
      Ks[j][d] = j < n ? VLOAD(d, kb + (long)(kv0 + j) * k_ss) : (vec_t)0.0f;
    }
    for (int e = lid; e < BLOCK_N * DV_VEC; e += BLOCK_M) {
      const int j = e / DV_VEC, d = e % DV_VEC;
      Vs[j][d] = j < n ? VLOAD(d, vb + (long)(kv0 + j) * v_ss) : (vec_t)0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#else
    // Rows past n are clamped to the last valid one (their scores are -inf, so their values unused).
    const __global float* kt = kb + (long)kv0 * k_ss;
    const __global float* vt = vb + (long)kv0 * v_ss;
#endif
    if (active) {
      float s[BLOCK_N];
      float tmax = -INFINITY;
      for (int j = 0; j < BLOCK_N; ++j) {
        vec_t dv = (vec_t)0.0f;
        const int jj = min(j, n - 1);
        for (int d = 0; d < DK_VEC; ++d) dv = fma(q[d], K_AT(jj, d), dv);
        const float dot = VSUM(dv);
        s[j] = j < n ? attn_fix_score(&p, dot, row, kv0 + j, kv_end, coff, mrow_f, mrow_b) : -INFINITY;
        tmax = fmax(tmax, s[j]);
      }
      const float m_new = fmax(m, tmax);
      if (m_new != -INFINITY) {  // a tile that is masked out entirely leaves the state unchanged
        const float alpha = exp(m - m_new);
        l *= alpha;
        for (int d = 0; d < DV_VEC; ++d) acc[d] *= alpha;
        for (int j = 0; j < BLOCK_N; ++j) {
          const float pj = exp(s[j] - m_new);
          l += pj;
          const int jj = min(j, n - 1);
          for (int d = 0; d < DV_VEC; ++d) acc[d] = fma((vec_t)pj, V_AT(jj, d), acc[d]);
        }
        m = m_new;
      }
    }
  }
  if (active) {
    // A row with every key masked has no softmax; it yields zeros (documented in layers/attention.hpp).
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    __global float* op = O + o_off + b * o_sb + h * o_sh + (long)row * o_ss;
    for (int d = 0; d < DV_VEC; ++d) {
      const vec_t o = acc[d] * inv;
#if VEC == 1
      op[d] = o;
#else
      CAT_VSTORE(o, d, op);
#endif
    }
  }
}

#endif  // attention_fused

#if ATT_KERNEL == 0 || ATT_KERNEL == 2
// ---------------------------------------------------------------------------------------------------
// CPU kernel: register blocking instead of work-group tiles. PoCL runs a work-group on one thread and
// its work-items one after another, so the fused kernel's one-row-per-work-item shape leaves the FMA
// units idle on horizontal sums. Here one work-item owns BQ query rows and walks the keys in blocks
// of 16: Q.K^T of a block is a BQ x 16 GEMM micro-tile (one float16 of packed K per head-dim step, BQ
// broadcast q values), the online softmax runs on whole float16 score vectors, and P.V accumulates
// BQ rows x VEC_V head-dim lanes per loaded V row. K is packed first (attention_pack_k) into blocks of
// 16 keys transposed, Kp[b][hk][blk][d][16], so the score loop reads one contiguous vector per step.
//
// Macros: BQ (rows per work-item, 1..8), VEC_V (1, 2, 4, 8 or 16; divides the V head size), MAX_DV
// (upper bound of the V head size: the accumulator array size). Head sizes are run-time arguments.
#ifndef BQ
#define BQ 6
#endif
#ifndef VEC_V
#define VEC_V 16
#endif
#ifndef MAX_DV
#define MAX_DV 256
#endif
#define ATT_BKV 16

#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"  // float16 arguments of inlined helpers (see gemm.cl)
#endif

#define ATT_CAT_(a, b) a##b
#define ATT_CAT(a, b) ATT_CAT_(a, b)
#if VEC_V == 1
typedef float vv_t;
#define VV_LOAD(i, p) ((p)[i])
#define VV_STORE(x, i, p) ((p)[i] = (x))
#else
typedef ATT_CAT(float, VEC_V) vv_t;
#define VV_LOAD(i, p) ATT_CAT(vload, VEC_V)((i), (p))
#define VV_STORE(x, i, p) ATT_CAT(vstore, VEC_V)((x), (i), (p))
#endif

// K [.., Skv, D] of every (batch, kv head), any strides -> Kp[b][hk][blk][d][16], zero past Skv.
// Global (nblk * 16, Hkv, B).
__kernel void attention_pack_k(int Skv, int D, int nblk, __global const float* K, long k_off, long k_sb,
                               long k_sh, long k_ss, __global float* Kp, long kp_off) {
  const int j = get_global_id(0), hk = get_global_id(1), b = get_global_id(2);
  const long Hk = get_global_size(1);
  __global float* dst = Kp + kp_off + ((b * Hk + hk) * nblk + j / ATT_BKV) * (long)D * ATT_BKV + j % ATT_BKV;
  if (j < Skv) {
    __global const float* src = K + k_off + b * k_sb + hk * k_sh + (long)j * k_ss;
    for (int d = 0; d < D; ++d) dst[d * ATT_BKV] = src[d];
  } else {
    for (int d = 0; d < D; ++d) dst[d * ATT_BKV] = 0.0f;
  }
}

// e^x for x <= 0 on 16 lanes: 2^(x log2 e) split into 2^n (exponent bits, n = rint) times the degree-6
// Taylor polynomial of 2^f on [-1/2, 1/2] (relative error below 3e-7); below -87 (where e^x is
// subnormal) it is exactly 0, so masked (-inf) lanes give 0. Cheaper than PoCL's exp() on float16.
inline float16 att_exp16(float16 x) {
  const float16 t = fmax(x * 1.44269504f, -126.0f);
  const float16 n = rint(t);
  const float16 f = t - n;
  float16 q = (float16)(1.54035304e-4f);
  q = fma(q, f, (float16)(1.33335581e-3f));
  q = fma(q, f, (float16)(9.61812911e-3f));
  q = fma(q, f, (float16)(5.55041087e-2f));
  q = fma(q, f, (float16)(2.40226507e-1f));
  q = fma(q, f, (float16)(6.93147181e-1f));
  q = fma(q, f, (float16)(1.0f));
  const float16 r = q * as_float16((convert_int16(n) + 127) << 23);
  return select(r, (float16)(0.0f), x < (float16)(-87.0f));
}

// Plain compares, not fmax: scores are never NaN here, and fmax's NaN rules cost extra instructions.
inline float att_hmax16(float16 x) {
  float8 a = select(x.lo, x.hi, x.hi > x.lo);
  float4 c = select(a.lo, a.hi, a.hi > a.lo);
  float2 e = select(c.lo, c.hi, c.hi > c.lo);
  return e.hi > e.lo ? e.hi : e.lo;
}
inline float att_hsum16(float16 x) {
  float8 a = x.lo + x.hi;
  float4 c = a.lo + a.hi;
  float2 e = c.lo + c.hi;
  return e.lo + e.hi;
}

// The per-lane rules of attn_fix_score for a block of 16 keys at kv0 (scale and softcap already
// applied): masked, causally hidden and out-of-length keys become -inf, the additive mask is added.
inline float16 att_fix_block(const attn_params* p, float16 x, int row, int kv0, int kv_end, int coff,
                             __global const float* mrow_f, __global const uchar* mrow_b) {
  const int16 col = (int16)(kv0) + (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int16 ok = col < (int16)(kv_end);
  if (p->causal) ok &= col <= (int16)(row + coff);
#if MASK == 1
  (void)mrow_b;
  if (kv0 + ATT_BKV <= p->mask_cols) {
    x += vload16(0, mrow_f + kv0);
  } else {
    float t[ATT_BKV];
    for (int j = 0; j < ATT_BKV; ++j) t[j] = kv0 + j < p->mask_cols ? mrow_f[kv0 + j] : -INFINITY;
    x += vload16(0, t);
  }
#elif MASK == 2
  (void)mrow_f;
  uchar16 mb;
  if (kv0 + ATT_BKV <= p->mask_cols) {
    mb = vload16(0, mrow_b + kv0);
  } else {
    uchar t[ATT_BKV];
    for (int j = 0; j < ATT_BKV; ++j) t[j] = kv0 + j < p->mask_cols ? mrow_b[kv0 + j] : 0;
    mb = vload16(0, t);
  }
  ok &= convert_int16(mb) != (int16)(0);
#else
  (void)mrow_f;
  (void)mrow_b;
#endif
  return select((float16)(-INFINITY), x, ok);
}

// One work-item per BQ rows r = g * Sq + s of one kv head (as attention_fused: GQA rows share K/V).
// Global (ceil(group * Sq / BQ), Hkv, B); any work-group size (1 on CPUs).
__kernel void attention_blocked(attn_params p, int D, int Dv, int nblk, __global const float* Q, long q_off,
                                long q_sb, long q_sh, long q_ss, __global const float* Kp, long kp_off,
                                __global const float* V, long v_off, long v_sb, long v_sh, long v_ss,
                                __global float* O, long o_off, long o_sb, long o_sh, long o_ss,
                                __global const void* mask, long mask_off, __global const lens_t* lens,
                                long lens_off) {
  const int hk = get_global_id(1), b = get_global_id(2);
  const long Hk = get_global_size(1);
  const int rows = p.group * p.Sq;
  const int r0 = get_global_id(0) * BQ;
  if (r0 >= rows) return;
  lens += lens_off;
  const int kv_end = attn_kv_end(&p, lens, b);
  const int coff = attn_causal_offset(&p, kv_end);

  // Rows past the last are clamped to it (computed, not stored) so every loop has BQ rows.
  __global const float* qp[BQ];
  int row[BQ];
  long mo[BQ];
  int row_min = p.Sq, row_max = 0;
#pragma unroll
  for (int i = 0; i < BQ; ++i) {
    const int r = min(r0 + i, rows - 1);
    const int h = hk * p.group + r / p.Sq;
    row[i] = r % p.Sq;
    qp[i] = Q + q_off + b * q_sb + h * q_sh + (long)row[i] * q_ss;
    mo[i] = mask_off + b * p.mask_sb + h * p.mask_sh + (long)row[i] * p.mask_ss;
    row_min = min(row_min, row[i]);
    row_max = max(row_max, row[i]);
  }
  int kv_limit = kv_end;
  if (p.causal) kv_limit = min(kv_limit, row_max + coff + 1);
  kv_limit = max(kv_limit, 0);
  // Keys below clean_end are visible to every row: those blocks skip the per-lane rules (no mask).
  int clean_end = kv_limit;
  if (p.causal) clean_end = min(clean_end, row_min + coff + 1);

  const int nc = Dv / VEC_V;
  vv_t acc[BQ][MAX_DV / VEC_V];
  float m[BQ];
  float16 l[BQ];
#pragma unroll
  for (int i = 0; i < BQ; ++i) {
    m[i] = -INFINITY, l[i] = (float16)(0.0f);
    for (int c = 0; c < nc; ++c) acc[i][c] = (vv_t)(0.0f);
  }
  __global const float* kp = Kp + kp_off + (b * Hk + hk) * nblk * (long)D * ATT_BKV;
  __global const float* vb = V + v_off + b * v_sb + hk * v_sh;

  for (int kv0 = 0; kv0 < kv_limit; kv0 += ATT_BKV) {
    // Scores of BQ rows x 16 keys.
    __global const float* kb = kp + (long)(kv0 / ATT_BKV) * D * ATT_BKV;
    float16 s[BQ];
#pragma unroll
    for (int i = 0; i < BQ; ++i) s[i] = (float16)(0.0f);
    for (int d = 0; d < D; ++d) {
      const float16 kv = vload16(d, kb);
#pragma unroll
      for (int i = 0; i < BQ; ++i) s[i] = fma((float16)(qp[i][d]), kv, s[i]);
    }
    // Online softmax per row on the whole vector.
    const bool clean = MASK == 0 && kv0 + ATT_BKV <= clean_end;
    float alpha[BQ];
    float pb[BQ][ATT_BKV];
#pragma unroll
    for (int i = 0; i < BQ; ++i) {
      float16 x = s[i] * p.scale;
      if (p.softcap > 0.0f) x = p.softcap * tanh(x / p.softcap);
#if MASK == 1
      __global const float* mf = (__global const float*)mask + mo[i];
      __global const uchar* mb = 0;
#elif MASK == 2
      __global const float* mf = 0;
      __global const uchar* mb = (__global const uchar*)mask + mo[i];
#else
      __global const float* mf = 0;
      __global const uchar* mb = 0;
#endif
      if (!clean) x = att_fix_block(&p, x, row[i], kv0, kv_end, coff, mf, mb);
      const float bmax = att_hmax16(x);
      float16 pr = (float16)(0.0f);
      alpha[i] = 1.0f;
      if (bmax > m[i]) {  // the running max grows: rescale what was summed so far
        alpha[i] = exp(m[i] - bmax);
        l[i] *= alpha[i];
        m[i] = bmax;
      }
      if (m[i] != -INFINITY) {  // a row that has seen no visible key yet keeps its (empty) state
        pr = att_exp16(x - m[i]);
        l[i] += pr;  // lane-wise; summed across lanes once at the end
      }
      vstore16(pr, 0, pb[i]);
    }
    // P.V: rows past kv_limit are clamped to the last valid one (their weight is 0; the clamp keeps
    // reads inside the written part of a KV cache, whose tail may hold NaN bit patterns).
    __global const float* vrow[ATT_BKV];
#pragma unroll
    for (int j = 0; j < ATT_BKV; ++j) vrow[j] = vb + (long)min(kv0 + j, kv_limit - 1) * v_ss;
    for (int c = 0; c < nc; ++c) {
      vv_t a[BQ];
#pragma unroll
      for (int i = 0; i < BQ; ++i) a[i] = acc[i][c] * alpha[i];
#pragma unroll
      for (int j = 0; j < ATT_BKV; ++j) {
        const vv_t v = VV_LOAD(c, vrow[j]);
#pragma unroll
        for (int i = 0; i < BQ; ++i) a[i] = fma((vv_t)(pb[i][j]), v, a[i]);
      }
#pragma unroll
      for (int i = 0; i < BQ; ++i) acc[i][c] = a[i];
    }
  }
#pragma unroll
  for (int i = 0; i < BQ; ++i) {
    if (r0 + i < rows) {
      // A row with every key masked has no softmax; it yields zeros (as attention_fused).
      const float sum = att_hsum16(l[i]);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      const int r = r0 + i;
      const int h = hk * p.group + r / p.Sq;
      __global float* op = O + o_off + b * o_sb + h * o_sh + (long)row[i] * o_ss;
      for (int c = 0; c < nc; ++c) VV_STORE(acc[i][c] * inv, c, op);
    }
  }
  (void)mask;
  (void)mo;
}
#endif  // attention_blocked

#if ATT_KERNEL == 0 || ATT_KERNEL == 3
// Plain path, between the two GEMMs: scores [B, Hq, Sq, Skv] (already scaled by the GEMM's alpha, so
// p.scale is 1 here) become probabilities in place. One work-item per row; global (Sq, Hq, B).
__kernel void attention_softmax_rows(attn_params p, __global float* S, long s_off, __global const void* mask,
                                     long mask_off, __global const lens_t* lens, long lens_off) {
  const int row = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
  if (row >= p.Sq) return;
  lens += lens_off;
  const int kv_end = attn_kv_end(&p, lens, b);
  const int coff = attn_causal_offset(&p, kv_end);
  __global float* sr = S + s_off + (((long)b * p.q_heads + h) * p.Sq + row) * p.Skv;
  const long mrow = mask_off + b * p.mask_sb + h * p.mask_sh + (long)row * p.mask_ss;
  __global const float* mrow_f = 0;
  __global const uchar* mrow_b = 0;
#if MASK == 1
  mrow_f = (__global const float*)mask + mrow;
#elif MASK == 2
  mrow_b = (__global const uchar*)mask + mrow;
#else
  (void)mask;
  (void)mrow;
#endif
  float m = -INFINITY;
  for (int j = 0; j < p.Skv; ++j) {
    const float s = attn_fix_score(&p, sr[j], row, j, kv_end, coff, mrow_f, mrow_b);
    sr[j] = s;
    m = fmax(m, s);
  }
  float sum = 0.0f;
  for (int j = 0; j < p.Skv; ++j) {
    const float e = m == -INFINITY ? 0.0f : exp(sr[j] - m);
    sr[j] = e;
    sum += e;
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int j = 0; j < p.Skv; ++j) sr[j] *= inv;
}

// KV cache: copies new K or V rows [B, H, S_new, D] (any strides) to positions pos.. of the cache
// [B, H, max_len, D], and (work-items with d == 0, s == 0, h == 0) stores the new length per batch.
// Global (D, S_new, B*H).
__kernel void kv_cache_append(int H, int D, int max_len, int pos, __global const float* src, long src_off,
                              long src_sb, long src_sh, long src_ss, __global float* cache, long cache_off,
                              __global int* lens, long lens_off) {
  const int d = get_global_id(0), s = get_global_id(1), bh = get_global_id(2);
  const int b = bh / H, h = bh % H;
  cache[cache_off + ((long)bh * max_len + pos + s) * D + d] = src[src_off + b * src_sb + h * src_sh + s * src_ss + d];
  if (d == 0 && s == 0 && h == 0 && lens) lens[lens_off + b] = pos + (int)get_global_size(1);
}

// fp16 storage for the ONNX Attention node (models/ops_attention.cpp): its f16 inputs are widened to f32
// and its outputs narrowed back (round to nearest even) around the f32 kernels. vload_half /
// vstore_half are core OpenCL: no cl_khr_fp16 needed. Global (n).
__kernel void attention_half_to_float(__global const half* src, long src_off, __global float* dst, long dst_off) {
  const long i = get_global_id(0);
  dst[dst_off + i] = vload_half(src_off + i, src);
}
__kernel void attention_float_to_half(__global const float* src, long src_off, __global half* dst, long dst_off) {
  const long i = get_global_id(0);
  vstore_half_rte(src[src_off + i], dst_off + i, dst);
}

// Plain path, ONNX qk_matmul_output: copies the scores at one stage to `out` [B, Hq, Sq, Skv]. Mode 0:
// scale * Q.K (S as the first GEMM left it); 1: after softcap; 2: after softcap + mask (masked = -inf);
// 3: the softmax (enqueued after attention_softmax_rows). Global (Skv, Sq, B * Hq).
__kernel void attention_qk_output(attn_params p, int mode, __global const float* S, long s_off, __global float* out,
                                  long out_off, __global const void* mask, long mask_off,
                                  __global const lens_t* lens, long lens_off) {
  const int j = get_global_id(0), row = get_global_id(1), bh = get_global_id(2);
  const int b = bh / p.q_heads, h = bh % p.q_heads;
  const long idx = ((long)bh * p.Sq + row) * p.Skv + j;
  float x = S[s_off + idx];
  if (mode == 1 && p.softcap > 0.0f) {
    x = p.softcap * tanh(x / p.softcap);
  } else if (mode == 2) {
    lens += lens_off;
    const int kv_end = attn_kv_end(&p, lens, b);
    const long mrow = mask_off + b * p.mask_sb + h * p.mask_sh + (long)row * p.mask_ss;
    __global const float* mrow_f = 0;
    __global const uchar* mrow_b = 0;
#if MASK == 1
    mrow_f = (__global const float*)mask + mrow;
#elif MASK == 2
    mrow_b = (__global const uchar*)mask + mrow;
#else
    (void)mask;
    (void)mrow;
#endif
    x = attn_fix_score(&p, x, row, j, kv_end, attn_causal_offset(&p, kv_end), mrow_f, mrow_b);
  }
  out[out_off + idx] = x;
}
#endif  // plain path + KV cache
