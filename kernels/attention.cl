// Scaled-dot-product attention: the fused kernel (K/V tiles through local memory, online softmax, the
// Sq x Skv score matrix never stored), its CPU twin attention_blocked (16 query rows across the lanes
// of a float16, one or two such groups per work-item, against blocks of keys, register-blocked Q.K^T and P.V; see its section), the row softmax of the
// plain path (scores in memory, GEMMs in gemm.cl) and the KV-cache append.
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
//   SPLIT_KV              0 / 1: attention_fused covers one chunk of the keys per work-group (the keys split
//                          over dimension 2 with the batch) and writes its partial softmax state; then
//                          attention_combine merges the chunks (a decode step on a GPU: a few query rows
//                          per kv head would otherwise leave all but a handful of compute units idle)
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

#ifndef SPLIT_KV
#define SPLIT_KV 0
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
// each kernel of a program): 0 all, 1 attention_fused, 2 attention_blocked,
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
    __global const void* mask, long mask_off, __global const lens_t* lens, long lens_off
#if SPLIT_KV
    , int nsplit, int chunk, __global float* part, long part_off
#endif
    ) {
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
#if SPLIT_KV
  const int b = get_global_id(2) / nsplit, sp = get_global_id(2) % nsplit;
#else
  const int b = get_global_id(2);
#endif
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
#if SPLIT_KV
  const int kv_lo = sp * chunk;  // this work-group's keys: [kv_lo, kv_limit)
  kv_limit = min(kv_limit, kv_lo + chunk);
#else
  const int kv_lo = 0;
#endif

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
  for (int kv0 = kv_lo; kv0 < kv_limit; kv0 += BLOCK_N) {
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
#if SPLIT_KV
  if (active) {
    // The chunk's state: unnormalised accumulator, running max, sum (m = -inf, l = 0: no visible key).
    __global float* pp = part + part_off + ((((long)b * p.q_heads + h) * p.Sq + row) * nsplit + sp) * (HEAD_DIM_V + 2);
    for (int d = 0; d < DV_VEC; ++d) {
#if VEC == 1
      pp[d] = acc[d];
#else
      CAT_VSTORE(acc[d], d, pp);
#endif
    }
    pp[HEAD_DIM_V] = m;
    pp[HEAD_DIM_V + 1] = l;
  }
#else
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
#endif  // SPLIT_KV
}

#if SPLIT_KV
// Merges the nsplit chunk states of each query row: with M the largest chunk max, the row's output is
// sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s (zeros when no chunk saw a visible key, as above).
// One work-item per output element. Global (round_up(HEAD_DIM_V, 64 or less), Hq * Sq, B).
__kernel void attention_combine(attn_params p, int nsplit, __global const float* part, long part_off,
                                __global float* O, long o_off, long o_sb, long o_sh, long o_ss) {
  const int d = get_global_id(0), hr = get_global_id(1), b = get_global_id(2);
  if (d >= HEAD_DIM_V) return;
  const int h = hr / p.Sq, row = hr % p.Sq;
  __global const float* pp = part + part_off + (((long)b * p.q_heads + h) * p.Sq + row) * nsplit * (HEAD_DIM_V + 2);
  float mx = -INFINITY;
  for (int s = 0; s < nsplit; ++s) mx = fmax(mx, pp[s * (HEAD_DIM_V + 2) + HEAD_DIM_V]);
  float num = 0.0f, den = 0.0f;
  if (mx != -INFINITY) {
    for (int s = 0; s < nsplit; ++s) {
      __global const float* q = pp + s * (HEAD_DIM_V + 2);
      const float w = exp(q[HEAD_DIM_V] - mx);  // 0 for a chunk with no visible key (m = -inf)
      num = fma(w, q[d], num);
      den = fma(w, q[HEAD_DIM_V + 1], den);
    }
  }
  O[o_off + b * o_sb + h * o_sh + (long)row * o_ss + d] = den > 0.0f ? num / den : 0.0f;
}
#endif  // SPLIT_KV

#endif  // attention_fused

#if ATT_KERNEL == 0 || ATT_KERNEL == 2
// ---------------------------------------------------------------------------------------------------
// CPU kernel with query rows across the 16 lanes of a float16: one work-item owns 16 query rows (times
// ATT_RG, below: this paragraph describes one group) and
// walks the keys in blocks of ATT_BKV. Scores of a block are vectors s[j] (key j, one lane per row), so
// the online softmax (running max, rescale, exp, row sums) is lane-wise arithmetic with no horizontal
// reductions and no per-row branches. Both products are register-blocked like a GEMM micro-kernel:
// Q.K^T takes ATT_KB keys per pass, whose ATT_KB accumulators stay in registers while d walks the
// head (per step one vector of the work-item's transposed, pre-scaled Q and ATT_KB broadcast K
// values); P.V takes ATT_CB output dims per pass (the output lives transposed, acc[dv] = one vector
// of 16 rows; per key one vector of weights and ATT_CB broadcast V values). The accumulators plus
// the two operands must fit the vector registers, or every FMA drags a spill along: 16 ymm on AVX2
// (a float16 is two of them) take ATT_KB 6 / ATT_CB 4 with one group; 32 zmm on AVX-512 take 8 / 8
// with two groups (16 accumulators, 2 + 1 operands; the host chooses by the device's preferred float
// vector width; `cldl tune --op attention` can override).
// K and V are read in place: a packed (transposed) copy of K made by a separate kernel cost ~10% more
// on PoCL (its pass over K plus a launch) than the second pass over Q here. Scores are kept in the
// log2 domain (Q pre-multiplied by scale * log2 e), so the exponential is exp2 without a multiply.
//
// Macros: MAX_D, MAX_DV (upper bounds of the head sizes: the private transposed Q and output);
// ATT_RG row groups of 16 per work-item (1 or 2), ATT_KB keys per Q.K^T pass, ATT_CB output dims per
// P.V pass, ATT_BKV keys per block (a multiple of ATT_KB). Head sizes are run-time arguments.
#ifndef MAX_D
#define MAX_D 256
#endif
#ifndef MAX_DV
#define MAX_DV 256
#endif
#define ATT_LANES 16
#ifndef ATT_RG
#define ATT_RG 1
#endif
#define ATT_ROWS (ATT_LANES * ATT_RG)
#ifndef ATT_KB
#define ATT_KB 6
#endif
#ifndef ATT_CB
#define ATT_CB 4
#endif
#ifndef ATT_BKV
#define ATT_BKV 24
#endif
#if ATT_KB < 1 || ATT_CB < 1 || ATT_BKV % ATT_KB != 0
#error "ATT_KB and ATT_CB must be positive and ATT_KB must divide ATT_BKV"
#endif

#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#endif

#define ATT_LOG2E 1.44269504f

// 2^t for t <= 0 on 16 lanes: 2^n times a degree-5 minimax polynomial of 2^f on [-1/2, 1/2]
// (relative error below 2.4e-7), n = t rounded to an integer by adding 1.5 * 2^23 (its low mantissa
// bits then hold n, which also gives the exponent bits; PoCL's rint() on float16 costs ~20 instructions).
// t is clamped at -127, where the exponent bits give exactly 0, so -inf (masked) lanes give 0.
inline float16 att_exp2_16(float16 t) {
  t = fmax(t, (float16)(-127.0f));
  const float16 tm = t + (float16)(12582912.0f);
  const float16 f = t - (tm - (float16)(12582912.0f));
  float16 q = (float16)(1.32764701e-3f);
  q = fma(q, f, (float16)(9.67554189e-3f));
  q = fma(q, f, (float16)(5.55071346e-2f));
  q = fma(q, f, (float16)(2.40221202e-1f));
  q = fma(q, f, (float16)(6.93146944e-1f));
  q = fma(q, f, (float16)(1.00000012f));
  return q * as_float16((as_int16(tm) + 127) << 23);
}

// Transposes 16 x 16 floats in registers (Q in, the output out): four butterfly stages, each swapping
// the off-diagonal sub-blocks of size 8, 4, 2, 1 between row pairs (two two-source shuffles per pair),
// instead of 256 scalar moves. Clang's shuffle builtin; other compilers take the element-wise loop.
#if defined(__clang__)
inline void att_bfly(float16* lo, float16* hi, int b) {
  const float16 a = *lo, c = *hi;
  if (b == 8) {
    *lo = __builtin_shufflevector(a, c, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    *hi = __builtin_shufflevector(a, c, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  } else if (b == 4) {
    *lo = __builtin_shufflevector(a, c, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    *hi = __builtin_shufflevector(a, c, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  } else if (b == 2) {
    *lo = __builtin_shufflevector(a, c, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    *hi = __builtin_shufflevector(a, c, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  } else {
    *lo = __builtin_shufflevector(a, c, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
    *hi = __builtin_shufflevector(a, c, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
  }
}
inline void att_transpose16(float16* r) {
#pragma unroll
  for (int b = 8; b >= 1; b /= 2) {
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if (!(i & b)) att_bfly(&r[i], &r[i + b], b);
  }
}
#else
inline void att_transpose16(float16* r) {
  float t[256];
  for (int i = 0; i < 16; ++i) vstore16(r[i], i, t);
  for (int i = 0; i < 16; ++i)
    for (int x = 0; x < 16; ++x) ((float*)&r[i])[x] = t[x * 16 + i];
}
#endif

// One work-item per ATT_ROWS = 16 * ATT_RG rows r = g * Sq + s of one kv head (as attention_fused: GQA
// rows share K/V; rows past the last are clamped to it, computed and not stored). ATT_RG row groups of 16
// (one vector each) share every broadcast K and V value: with 2 groups a broadcast load feeds two FMAs,
// which takes the load ports off the critical path of both products (with 1 group each FMA carries its
// own broadcast load, plus one vector load per step). Private arrays hold group-interleaved vectors:
// qt vector (d * ATT_RG + g), acc vector (c * ATT_RG + g), s vector (j * ATT_RG + g).
// Global (ceil(group * Sq / ATT_ROWS), Hkv, B).
__kernel void attention_blocked(attn_params p, int D, int Dv, __global const float* Q, long q_off, long q_sb,
                                long q_sh, long q_ss, __global const float* K, long k_off, long k_sb, long k_sh,
                                long k_ss, __global const float* V, long v_off, long v_sb, long v_sh, long v_ss,
                                __global float* O, long o_off, long o_sb, long o_sh, long o_ss,
                                __global const void* mask, long mask_off, __global const lens_t* lens,
                                long lens_off) {
  const int hk = get_global_id(1), b = get_global_id(2);
  const int rows = p.group * p.Sq;
  const int r0 = get_global_id(0) * ATT_ROWS;
  if (r0 >= rows) return;
  lens += lens_off;
  const int kv_end = attn_kv_end(&p, lens, b);
  const int coff = attn_causal_offset(&p, kv_end);

  // Transposed Q of the rows, times scale * log2 e; the rows' positions and mask offsets per lane.
  float qt[MAX_D * ATT_ROWS];
  int row_of[ATT_ROWS], h_of[ATT_ROWS];
  long mo[ATT_ROWS];
  const float qscale = p.scale * ATT_LOG2E;
  __global const float* qp[ATT_ROWS];
  int g = r0 / p.Sq, row = r0 % p.Sq;  // stepped, not divided, per lane
  for (int i = 0; i < ATT_ROWS; ++i) {
    const int h = hk * p.group + g;
    row_of[i] = row, h_of[i] = h;
    mo[i] = mask_off + b * p.mask_sb + h * p.mask_sh + (long)row * p.mask_ss;
    qp[i] = Q + q_off + b * q_sb + h * q_sh + (long)row * q_ss;
    if (r0 + i + 1 < rows && ++row == p.Sq) row = 0, ++g;
  }
#pragma unroll
  for (int rg = 0; rg < ATT_RG; ++rg) {
    int d0 = 0;
    for (; d0 + 16 <= D; d0 += 16) {  // 16 x 16 tiles through registers
      float16 t[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) t[i] = vload16(0, qp[rg * 16 + i] + d0) * qscale;
      att_transpose16(t);
#pragma unroll
      for (int x = 0; x < 16; ++x) vstore16(t[x], (d0 + x) * ATT_RG + rg, qt);
    }
    for (; d0 < D; ++d0)
      for (int i = 0; i < ATT_LANES; ++i) qt[(d0 * ATT_RG + rg) * ATT_LANES + i] = qp[rg * 16 + i][d0] * qscale;
  }
  int16 rowv[ATT_RG];
#pragma unroll
  for (int rg = 0; rg < ATT_RG; ++rg) rowv[rg] = vload16(rg, row_of);
  int row_min = p.Sq, row_max = 0;
  for (int i = 0; i < ATT_ROWS; ++i) row_min = min(row_min, row_of[i]), row_max = max(row_max, row_of[i]);
  int kv_limit = kv_end;
  if (p.causal) kv_limit = min(kv_limit, row_max + coff + 1);
  kv_limit = max(kv_limit, 0);
  // Keys below clean_end are visible to every row: those blocks skip the per-lane rules (no mask).
  int clean_end = kv_limit;
  if (p.causal) clean_end = min(clean_end, row_min + coff + 1);
#if MASK
  // One mask row for all lanes (a mask broadcast over rows and heads, or one row per work-item):
  // a broadcast load per key instead of 16 scalar ones per group.
  bool mask_uniform = true;
  for (int i = 1; i < ATT_ROWS; ++i) mask_uniform = mask_uniform && mo[i] == mo[0];
#endif

  float16 acc[MAX_DV * ATT_RG];
  for (int c = 0; c < Dv * ATT_RG; ++c) acc[c] = (float16)(0.0f);
  float16 m[ATT_RG], l[ATT_RG];
#pragma unroll
  for (int rg = 0; rg < ATT_RG; ++rg) m[rg] = (float16)(-INFINITY), l[rg] = (float16)(0.0f);
  __global const float* kb = K + k_off + b * k_sb + hk * k_sh;
  __global const float* vb = V + v_off + b * v_sb + hk * v_sh;

  for (int kv0 = 0; kv0 < kv_limit; kv0 += ATT_BKV) {
    // Q.K^T, ATT_KB keys per pass: ATT_KB * ATT_RG accumulators (one vector of 16 rows each) stay in
    // registers while d walks the head; each step is ATT_RG vectors of Q^T and ATT_KB broadcast K values.
    float16 s[ATT_BKV * ATT_RG];
    float16 bmax[ATT_RG];
#pragma unroll
    for (int rg = 0; rg < ATT_RG; ++rg) bmax[rg] = (float16)(-INFINITY);
    // Keys of this block that exist: the last block's passes and P.V stop there (the scores past it
    // are masked to -inf below, whatever the skipped passes left in s).
    const int nk = min(ATT_BKV, kv_limit - kv0);
    // A loop, not unrolled: unrolled, LLVM 15 kept one accumulator of the last pass on the stack (a
    // store and reload around each of its FMAs, ~15% of the kernel on AVX2).
#pragma unroll 1
    for (int j0 = 0; j0 < nk; j0 += ATT_KB) {
      __global const float* kr[ATT_KB];
      float16 a[ATT_KB * ATT_RG];
#pragma unroll
      for (int t = 0; t < ATT_KB; ++t) {
        kr[t] = kb + (long)min(kv0 + j0 + t, kv_limit - 1) * k_ss;
#pragma unroll
        for (int rg = 0; rg < ATT_RG; ++rg) a[t * ATT_RG + rg] = (float16)(0.0f);
      }
      for (int d = 0; d < D; ++d) {
        float16 qv[ATT_RG];
#pragma unroll
        for (int rg = 0; rg < ATT_RG; ++rg) qv[rg] = vload16(d * ATT_RG + rg, qt);
#pragma unroll
        for (int t = 0; t < ATT_KB; ++t) {
          const float16 kv = (float16)(kr[t][d]);
#pragma unroll
          for (int rg = 0; rg < ATT_RG; ++rg) a[t * ATT_RG + rg] = fma(qv[rg], kv, a[t * ATT_RG + rg]);
        }
      }
      if (p.softcap > 0.0f) {
        // softcap applies to the natural-log-domain score: undo log2 e, cap, redo.
        const float c = p.softcap;
#pragma unroll
        for (int t = 0; t < ATT_KB * ATT_RG; ++t) a[t] = (c * ATT_LOG2E) * tanh(a[t] * (1.0f / (ATT_LOG2E * c)));
      }
#pragma unroll
      for (int t = 0; t < ATT_KB; ++t) {
#pragma unroll
        for (int rg = 0; rg < ATT_RG; ++rg) {
          const float16 v = a[t * ATT_RG + rg];
          s[(j0 + t) * ATT_RG + rg] = v;
          bmax[rg] = select(bmax[rg], v, v > bmax[rg]);  // the block max while the scores are in registers
        }
      }
    }
    const bool clean = MASK == 0 && kv0 + ATT_BKV <= clean_end;
    if (!clean) {
#pragma unroll
      for (int j = 0; j < ATT_BKV; ++j) {
        const int col = kv0 + j;
#pragma unroll
        for (int rg = 0; rg < ATT_RG; ++rg) {
          int16 ok = (int16)(col < kv_end ? -1 : 0);
          if (p.causal) ok &= (int16)(col) <= rowv[rg] + (int16)(coff);
          float16 sv = s[j * ATT_RG + rg];
#if MASK == 1
          if (col < p.mask_cols) {
            __global const float* mf = (__global const float*)mask;
            float16 mv;
            if (mask_uniform) {
              mv = (float16)(mf[mo[0] + col]);
            } else {
              float t[ATT_LANES];
              for (int i = 0; i < ATT_LANES; ++i) t[i] = mf[mo[rg * 16 + i] + col];
              mv = vload16(0, t);
            }
            sv = fma(mv, (float16)(ATT_LOG2E), sv);
          } else {
            ok = (int16)(0);
          }
#elif MASK == 2
          if (col < p.mask_cols) {
            __global const uchar* mb = (__global const uchar*)mask;
            if (mask_uniform) {
              if (mb[mo[0] + col] == 0) ok = (int16)(0);
            } else {
              uchar t[ATT_LANES];
              for (int i = 0; i < ATT_LANES; ++i) t[i] = mb[mo[rg * 16 + i] + col];
              ok &= convert_int16(vload16(0, t)) != (int16)(0);
            }
          } else {
            ok = (int16)(0);
          }
#endif
          s[j * ATT_RG + rg] = select((float16)(-INFINITY), sv, ok);
        }
      }
#pragma unroll
      for (int rg = 0; rg < ATT_RG; ++rg) {
        bmax[rg] = s[rg];
#pragma unroll
        for (int j = 1; j < ATT_BKV; ++j)
          bmax[rg] = select(bmax[rg], s[j * ATT_RG + rg], s[j * ATT_RG + rg] > bmax[rg]);
      }
    }
    // Online softmax, lane-wise. Lanes that have seen no visible key yet take 0 as their reference, so
    // every weight is exp2(-inf) = 0 there and the state stays empty.
    bool rescale = false;
    float16 alpha[ATT_RG], mref[ATT_RG];
#pragma unroll
    for (int rg = 0; rg < ATT_RG; ++rg) {
      const float16 m_new = select(m[rg], bmax[rg], bmax[rg] > m[rg]);
      mref[rg] = select(m_new, (float16)(0.0f), m_new == (float16)(-INFINITY));
      rescale = rescale || any(m_new != m[rg]);
      alpha[rg] = m[rg] - mref[rg];  // exponentiated below when some row's max grew
      m[rg] = m_new;
    }
    if (rescale) {  // some row's max grew: what it summed so far, to the new reference (in P.V below)
#pragma unroll
      for (int rg = 0; rg < ATT_RG; ++rg) {
        alpha[rg] = att_exp2_16(alpha[rg]);
        l[rg] *= alpha[rg];
      }
    }
#pragma unroll
    for (int j = 0; j < ATT_BKV; ++j) {
#pragma unroll
      for (int rg = 0; rg < ATT_RG; ++rg) {
        const float16 e = att_exp2_16(s[j * ATT_RG + rg] - mref[rg]);
        s[j * ATT_RG + rg] = e;
        l[rg] += e;
      }
    }
    // P.V, ATT_CB output dims per pass: ATT_CB * ATT_RG accumulators in registers; each key is ATT_RG
    // vectors of weights times ATT_CB broadcast V values. Only keys j < nk are read (below kv_limit:
    // inside the written part of a KV cache, whose tail may hold NaN bit patterns).
    __global const float* vt = vb + (long)kv0 * v_ss;
#define ATT_PV_PASS(CBN)                                                                           \
  {                                                                                                \
    float16 a[(CBN) * ATT_RG];                                                                     \
    _Pragma("unroll") for (int t = 0; t < (CBN) * ATT_RG; ++t) a[t] =                              \
        rescale ? acc[c * ATT_RG + t] * alpha[t % ATT_RG] : acc[c * ATT_RG + t];                   \
    for (int j = 0; j < nk; ++j) {                                                                 \
      float16 pv[ATT_RG];                                                                          \
      _Pragma("unroll") for (int rg = 0; rg < ATT_RG; ++rg) pv[rg] = s[j * ATT_RG + rg];           \
      __global const float* vr = vt + (long)j * v_ss + c;                                          \
      _Pragma("unroll") for (int t = 0; t < (CBN); ++t) {                                          \
        const float16 vv = (float16)(vr[t]);                                                       \
        _Pragma("unroll") for (int rg = 0; rg < ATT_RG; ++rg) a[t * ATT_RG + rg] =                 \
            fma(pv[rg], vv, a[t * ATT_RG + rg]);                                                   \
      }                                                                                            \
    }                                                                                              \
    _Pragma("unroll") for (int t = 0; t < (CBN) * ATT_RG; ++t) acc[c * ATT_RG + t] = a[t];         \
  }
    int c = 0;
    for (; c + ATT_CB <= Dv; c += ATT_CB) ATT_PV_PASS(ATT_CB)
    for (; c + 4 <= Dv; c += 4) ATT_PV_PASS(4)  // a tail of 4 dims keeps 4 * ATT_RG chains going
    for (; c < Dv; ++c) ATT_PV_PASS(1)
#undef ATT_PV_PASS
  }
  // A row with every key masked has no softmax; it yields zeros (as attention_fused).
#pragma unroll
  for (int rg = 0; rg < ATT_RG; ++rg) {
    const float16 inv = select((float16)(0.0f), (float16)(1.0f) / l[rg], l[rg] > (float16)(0.0f));
    const int nrows = min(ATT_LANES, rows - r0 - rg * ATT_LANES);
    __global float* op[ATT_LANES];
    for (int i = 0; i < ATT_LANES; ++i)
      op[i] = O + o_off + b * o_sb + h_of[rg * 16 + i] * o_sh + (long)row_of[rg * 16 + i] * o_ss;
    int c0 = 0;
    for (; c0 + 16 <= Dv; c0 += 16) {
      float16 t[16];
#pragma unroll
      for (int x = 0; x < 16; ++x) t[x] = acc[(c0 + x) * ATT_RG + rg] * inv;
      att_transpose16(t);
      for (int i = 0; i < nrows; ++i) vstore16(t[i], 0, op[i] + c0);
    }
    for (; c0 < Dv; ++c0) {
      const float16 o = acc[c0 * ATT_RG + rg] * inv;
      for (int i = 0; i < nrows; ++i) op[i][c0] = ((const float*)&o)[i];
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
