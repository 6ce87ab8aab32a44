// GEMM: C = act(alpha * op(A) * op(B) + beta * C + bias), row-major, strided batch on the last NDRange
// dimension (stride 0 = the same matrix for every batch item).
//
// Macros (defaults are correct on any device):
//   TRANS_A, TRANS_B  0/1: A stored K x M / B stored N x K
//   BIAS              0 none, 1 per column (length N), 2 per row (length M)
//   ACT               activation number (common.cl)
//   RESIDUAL          0/1: add R (C's layout: ldc, stride_c, offset r_off) after the bias, before the
//                     activation (a residual Add fused into a conv's epilogue); gemm_tile, gemm_gemv and
//                     gemm_epilogue take R, r_off as their last arguments whatever RESIDUAL is
//   MR                rows of C per work-item in gemm_tile (register block), 1..8
//   NR                the vector width of gemm_tile, 4, 8 or 16: columns of C per vector and per B panel
//   NC                vectors of NR columns per work-item in gemm_tile (NC adjacent panels), 1..4
//   B_PACKED          gemm_tile reads B from the panel layout written by gemm_pack_b
//   A_PACKED          gemm_tile reads A from the panel layout written by gemm_pack_a
//
// gemm_tile is the fast kernel: every work-item keeps an MR x (NC * NR) block of C in MR * NC vector
// registers and walks K once, loading NC NR-wide rows of B and MR scalars of A per step, so each broadcast
// A value feeds NC FMAs and each loaded B vector MR of them. That shape suits
// CPUs (PoCL runs one work-group per thread and vectorises only up to 256 bits on its own, so explicit
// float8/float16 rows are what fill the FMA units) and needs neither local memory nor barriers.
// gemm_simple is the reference-grade kernel (one output per work-item).

#ifndef TRANS_A
#define TRANS_A 0
#endif
#ifndef TRANS_B
#define TRANS_B 0
#endif
#ifndef BIAS
#define BIAS 0
#endif
#ifndef RESIDUAL
#define RESIDUAL 0
#endif
#ifndef MR
#define MR 4
#endif
#ifndef NR
#define NR 8
#endif
#ifndef NC
#define NC 1
#endif
#ifndef B_PACKED
#define B_PACKED 0
#endif
#ifndef A_PACKED
#define A_PACKED 0
#endif

// Clang warns that float16 arguments of vload16/vstore16 change the ABI without AVX-512; the calls are
// inlined, so the warning is noise on every PoCL build (gemm_gemv uses float16 whatever NR is).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#endif

#define CLDL_CAT_(a, b) a##b
#define CLDL_CAT(a, b) CLDL_CAT_(a, b)
#define VEC CLDL_CAT(float, NR)
#define VLOAD CLDL_CAT(vload, NR)
#define VSTORE CLDL_CAT(vstore, NR)
#define IVEC CLDL_CAT(int, NR)
#if NR == 4
#define IVEC_IOTA ((int4)(0, 1, 2, 3))
#elif NR == 8
#define IVEC_IOTA ((int8)(0, 1, 2, 3, 4, 5, 6, 7))
#else
#define IVEC_IOTA ((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
#endif

#if TRANS_A
#define A_AT(m, k) A[(k) * (long)lda + (m)]
#else
#define A_AT(m, k) A[(m) * (long)lda + (k)]
#endif
#if TRANS_B
#define B_AT(k, n) B[(n) * (long)ldb + (k)]
#else
#define B_AT(k, n) B[(k) * (long)ldb + (n)]
#endif

// Reference-grade kernel: one output per work-item. Correct on any device and any shape.
__kernel void gemm_simple(int M, int N, int K, __global const float* A, long a_off, int lda, long stride_a,
                          __global const float* B, long b_off, int ldb, long stride_b, __global float* C,
                          long c_off, int ldc, long stride_c, float alpha, float beta,
                          __global const float* bias, long bias_off, float act_a, float act_b) {
  const int n = get_global_id(0);
  const int m = get_global_id(1);
  const int b = get_global_id(2);
  if (m >= M || n >= N) return;
  A += a_off + b * stride_a;
  B += b_off + b * stride_b;
  C += c_off + b * stride_c;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc = fma(A_AT(m, k), B_AT(k, n), acc);
  float v = alpha * acc;
  if (beta != 0.0f) v += beta * C[m * ldc + n];
#if BIAS == 1
  v += bias[bias_off + n];
#elif BIAS == 2
  v += bias[bias_off + m];
#endif
  C[m * ldc + n] = APPLY_ACT(v, act_a, act_b);
}

// Steps of K each pack work-item copies: a PACK_K x NR (or MR) block touches each source cache line
// once whichever way the source is transposed.
#define PACK_K 16

// Copies op(B) of every batch item into panels of NR columns: P[b][panel][k][NR], zero-padded past N,
// so gemm_tile (B_PACKED=1) reads one aligned vector per k whatever the transpose and ldb.
// NDRange: (panels, ceil(K / PACK_K), batch_b).
__kernel void gemm_pack_b(int N, int K, __global const float* B, long b_off, int ldb, long stride_b,
                          __global float* P, long p_off) {
  const int panel = get_global_id(0);
  const int k0 = get_global_id(1) * PACK_K;
  const int b = get_global_id(2);
  const int panels = (N + NR - 1) / NR;
  if (panel >= panels || k0 >= K) return;
  const int n0 = panel * NR, kn = min(PACK_K, K - k0);
  B += b_off + b * stride_b;
  P += p_off + ((long)b * panels * K + (long)panel * K + k0) * NR;
#if TRANS_B
  // Column by column: each column of op(B) is a contiguous row of B.
  for (int j = 0; j < NR; ++j)
    for (int kk = 0; kk < kn; ++kk) P[kk * NR + j] = n0 + j < N ? B_AT(k0 + kk, n0 + j) : 0.0f;
#else
  if (n0 + NR <= N) {
    for (int kk = 0; kk < kn; ++kk) VSTORE(VLOAD(0, B + (long)(k0 + kk) * ldb + n0), kk, P);
  } else {
    for (int kk = 0; kk < kn; ++kk)
      for (int j = 0; j < NR; ++j) P[kk * NR + j] = n0 + j < N ? B_AT(k0 + kk, n0 + j) : 0.0f;
  }
#endif
}

// Copies op(A) of every batch item into panels of MR rows: P[b][panel][k][MR], zero-padded past M, so
// gemm_tile (A_PACKED=1) reads the MR values of step k from one place with a single pointer.
// NDRange: (panels, ceil(K / PACK_K), batch_a).
__kernel void gemm_pack_a(int M, int K, __global const float* A, long a_off, int lda, long stride_a,
                          __global float* P, long p_off) {
  const int panel = get_global_id(0);
  const int k0 = get_global_id(1) * PACK_K;
  const int b = get_global_id(2);
  const int panels = (M + MR - 1) / MR;
  if (panel >= panels || k0 >= K) return;
  const int m0 = panel * MR, kn = min(PACK_K, K - k0);
  A += a_off + b * stride_a;
  P += p_off + ((long)b * panels * K + (long)panel * K + k0) * MR;
#if TRANS_A
  for (int kk = 0; kk < kn; ++kk)
    for (int i = 0; i < MR; ++i) P[kk * MR + i] = m0 + i < M ? A_AT(m0 + i, k0 + kk) : 0.0f;
#else
  // Row by row: each row of A is contiguous along k.
  for (int i = 0; i < MR; ++i)
    for (int kk = 0; kk < kn; ++kk) P[kk * MR + i] = m0 + i < M ? A_AT(m0 + i, k0 + kk) : 0.0f;
#endif
}

// One step of the register block: acc[i][c] += A(row i, k) * b_[c] for all MR rows and NC vectors, with
// b_[c] the B vector of panel c at row k, loaded by LOADB(c) first.
#define GEMM_RANK1(LOADB)                                                     \
  do {                                                                        \
    VEC b_[NC];                                                               \
    _Pragma("unroll") for (int c = 0; c < NC; ++c) b_[c] = LOADB(c);          \
    _Pragma("unroll") for (int i = 0; i < MR; ++i) {                          \
      const VEC a_ = (VEC)(A_K(i, k));                                        \
      _Pragma("unroll") for (int c = 0; c < NC; ++c)                          \
        acc[i][c] = fma(a_, b_[c], acc[i][c]);                                \
    }                                                                         \
  } while (0)

// Reads row k of the NR-wide B panel at column n0 into a vector, zero past N (edge panels and TRANS_B).
inline VEC gemm_b_gather(__global const float* B, int ldb, int k, int n0, int N) {
  float tmp[NR];
#pragma unroll
  for (int j = 0; j < NR; ++j) tmp[j] = n0 + j < N ? B_AT(k, n0 + j) : 0.0f;
  return VLOAD(0, tmp);
}

// NDRange: (ceil(M / (MR * mt)), ceil(N / (NR * NC)), batch); any work-group size (1 on CPUs). Same arguments
// as gemm_simple plus `mt`; with B_PACKED, B is the gemm_pack_b output and stride_b its per-batch stride.
__kernel void gemm_tile(int M, int N, int K, __global const float* A, long a_off, int lda, long stride_a,
                        __global const float* B, long b_off, int ldb, long stride_b, __global float* C,
                        long c_off, int ldc, long stride_c, float alpha, float beta,
                        __global const float* bias, long bias_off, float act_a, float act_b, int mt,
                        __global const float* R, long r_off) {
  const int panel = get_global_id(1) * NC;
  const int n0 = panel * NR;
  const int b = get_global_id(2);
  if (n0 >= N) return;
  A += a_off + b * stride_a;
  B += b_off + b * stride_b;
  C += c_off + b * stride_c;
#if RESIDUAL
  R += r_off + b * stride_c;
#endif
  // Panels past N (the last work-item's, when the panel count is not a multiple of NC) read the last
  // panel again: computed, then dropped by the epilogue, so the K loop has no branches.
  const int last_panel = (N - 1) / NR;

  // `mt` consecutive row blocks per work-item (a run-time count, so no extra builds): with small K one
  // block is too little work next to the cost of starting a work-group on a CPU.
  for (int t = 0; t < mt; ++t) {
  const int mpanel = get_global_id(0) * mt + t;
  const int m0 = mpanel * MR;
  if (m0 >= M) return;
  VEC acc[MR][NC];
#pragma unroll
  for (int i = 0; i < MR; ++i)
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[i][c] = (VEC)(0.0f);
  // Rows past M are clamped to M - 1 (computed, then dropped by the epilogue) so the K loop has no
  // branches. The loops are written out here rather than in a helper function so the accumulators
  // stay in registers (PoCL does not always inline).
#if A_PACKED
  __global const float* ap = A + (long)mpanel * K * MR;
#define A_K(i, k) ap[(k) * MR + (i)]
#else
  int rows[MR];
#pragma unroll
  for (int i = 0; i < MR; ++i) rows[i] = min(m0 + i, M - 1);
#define A_K(i, k) A_AT(rows[i], k)
#endif
#if B_PACKED
  __global const float* bp[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) bp[c] = B + (long)min(panel + c, last_panel) * K * NR;
#define LOADB_PACKED(c) VLOAD(0, bp[c] + (long)k * NR)
  for (int k = 0; k < K; ++k) GEMM_RANK1(LOADB_PACKED);
#undef LOADB_PACKED
#else
#define LOADB_GATHER(c) gemm_b_gather(B, ldb, k, n0 + (c) * NR, N)
#if TRANS_B
  for (int k = 0; k < K; ++k) GEMM_RANK1(LOADB_GATHER);
#else
#define LOADB_ROW(c) VLOAD(0, B + (long)k * ldb + n0 + (c) * NR)
  if (n0 + NC * NR <= N) {
    for (int k = 0; k < K; ++k) GEMM_RANK1(LOADB_ROW);
  } else {
    // The work-item's columns run past N (the last one; every one where N < NC * NR). Row k is still read
    // as whole vectors and the lanes past N are cleared by a select (bitwise, so whatever the next row
    // holds there never reaches the sums), as long as the read stays inside the matrix: rows from kv on,
    // whose read would run past its last element, are gathered. Gathering every row cost 3-5x (a
    // 512x49x4608 GEMM, ResNet's 7x7 stage, ran at 17 GFLOP/s).
    IVEC keep_[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) keep_[c] = (IVEC)(n0 + c * NR) + IVEC_IOTA < (IVEC)(N);
    const long rem = (long)(K - 1) * ldb + N - n0 - NC * NR;  // last row's end minus this strip's read end
    const int kv = rem < 0 ? 0 : (int)min((long)K, rem / ldb + 1);
#define LOADB_MASKED(c) select((VEC)(0.0f), LOADB_ROW(c), keep_[c])
    int k = 0;
    for (; k < kv; ++k) GEMM_RANK1(LOADB_MASKED);
    for (; k < K; ++k) GEMM_RANK1(LOADB_GATHER);
#undef LOADB_MASKED
  }
#undef LOADB_ROW
#endif
#undef LOADB_GATHER
#endif

  // Epilogue: per full vector of C, vector operations (per element the scalar path's operations in its
  // order); the activation, other than none and ReLU, and partial vectors past N element by element.
#pragma unroll
  for (int i = 0; i < MR; ++i) {
    const int m = m0 + i;
    if (m < M) {
      __global float* crow = C + (long)m * ldc;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int nb = n0 + c * NR;
        if (nb + NR <= N) {
          __global float* cp = crow + nb;
          VEC v = alpha * acc[i][c];
          if (beta != 0.0f) v += beta * VLOAD(0, cp);
#if BIAS == 1
          v += VLOAD(0, bias + bias_off + nb);
#elif BIAS == 2
          v += (VEC)(bias[bias_off + m]);
#endif
#if RESIDUAL
          v += VLOAD(0, R + (long)m * ldc + nb);
#endif
#if ACT_VEC
          v = APPLY_ACT_V(v, act_a, act_b);
#else
          float t_[NR];
          VSTORE(v, 0, t_);
          for (int j = 0; j < NR; ++j) t_[j] = APPLY_ACT(t_[j], act_a, act_b);
          v = VLOAD(0, t_);
#endif
          VSTORE(v, 0, cp);
        } else {
          float out[NR];
          VSTORE(acc[i][c], 0, out);
          for (int j = 0; j < NR; ++j) {
            const int n = nb + j;
            if (n < N) {
              float v = alpha * out[j];
              if (beta != 0.0f) v += beta * crow[n];
#if BIAS == 1
              v += bias[bias_off + n];
#elif BIAS == 2
              v += bias[bias_off + m];
#endif
#if RESIDUAL
              v += R[(long)m * ldc + n];
#endif
              crow[n] = APPLY_ACT(v, act_a, act_b);
            }
          }
        }
      }
    }
  }
#undef A_K
  }  // row blocks
}

// Bias, residual and activation after a provider that has no epilogue (CLBlast): C = act(C + bias + R) in
// place. NDRange: (N, M, batch).
__kernel void gemm_epilogue(int M, int N, __global float* C, long c_off, int ldc, long stride_c,
                            __global const float* bias, long bias_off, float act_a, float act_b,
                            __global const float* R, long r_off) {
  const int n = get_global_id(0);
  const int m = get_global_id(1);
  const int b = get_global_id(2);
  if (m >= M || n >= N) return;
  const long at = b * stride_c + (long)m * ldc + n;
  C += c_off + at;
  float v = *C;
#if BIAS == 1
  v += bias[bias_off + n];
#elif BIAS == 2
  v += bias[bias_off + m];
#endif
#if RESIDUAL
  v += R[r_off + at];
#endif
  *C = APPLY_ACT(v, act_a, act_b);
}

// Vector-matrix products (M <= 4 rows of A, B stored N x K: a dense layer or MatMul with transposed weights
// at batch 1..4). gemm_tile would read B through its packed panels, a copy of all the weights per call, and
// use MR of its rows; here every weight is read once, straight from B, in float16 loads along K (each row
// of B^T is contiguous), and each work-item keeps GV_COLS output columns x MR rows of float16 partial sums
// (no reduction across work-items, no atomics), summing the lanes at the end. Then the same epilogue as
// gemm_simple. NDRange: (ceil(N / GV_COLS), 1, batch); MR = M. Correct for any M, but meant for M <= 4.
#ifndef GV_COLS
#define GV_COLS 4
#endif
inline float gemv_hsum16(float16 v) {
  const float8 a = v.lo + v.hi;
  const float4 b = a.lo + a.hi;
  return (b.x + b.y) + (b.z + b.w);
}
inline float16 gemv_load_a(__global const float* A, int lda, int m, int k) {
#if TRANS_A
  float t[16];
  for (int j = 0; j < 16; ++j) t[j] = A_AT(m, k + j);
  return vload16(0, t);
#else
  return vload16(0, A + (long)m * lda + k);
#endif
}
__kernel void gemm_gemv(int M, int N, int K, __global const float* A, long a_off, int lda, long stride_a,
                        __global const float* B, long b_off, int ldb, long stride_b, __global float* C,
                        long c_off, int ldc, long stride_c, float alpha, float beta,
                        __global const float* bias, long bias_off, float act_a, float act_b,
                        __global const float* R, long r_off) {
  const int n0 = get_global_id(0) * GV_COLS;
  const int b = get_global_id(2);
  if (n0 >= N) return;
  A += a_off + b * stride_a;
  B += b_off + b * stride_b;
  C += c_off + b * stride_c;
#if RESIDUAL
  R += r_off + b * stride_c;
#endif
  // Columns past N read column N - 1 again (dropped by the epilogue), so the K loop has no branches.
  __global const float* brow[GV_COLS];
#pragma unroll
  for (int j = 0; j < GV_COLS; ++j) brow[j] = &B_AT(0, min(n0 + j, N - 1));
  float16 acc[MR][GV_COLS];
#pragma unroll
  for (int i = 0; i < MR; ++i)
#pragma unroll
    for (int j = 0; j < GV_COLS; ++j) acc[i][j] = (float16)(0.0f);
  const int rows = min(M, MR);
  int k = 0;
#if TRANS_B
  for (; k + 16 <= K; k += 16) {
    float16 bv[GV_COLS];
#pragma unroll
    for (int j = 0; j < GV_COLS; ++j) bv[j] = vload16(0, brow[j] + k);
#pragma unroll
    for (int i = 0; i < MR; ++i) {
      const float16 av = gemv_load_a(A, lda, min(i, rows - 1), k);
#pragma unroll
      for (int j = 0; j < GV_COLS; ++j) acc[i][j] = fma(av, bv[j], acc[i][j]);
    }
  }
#endif
  float s[MR][GV_COLS];
#pragma unroll
  for (int i = 0; i < MR; ++i)
#pragma unroll
    for (int j = 0; j < GV_COLS; ++j) s[i][j] = gemv_hsum16(acc[i][j]);
  for (; k < K; ++k)
#pragma unroll
    for (int i = 0; i < MR; ++i) {
      const float a = A_AT(min(i, rows - 1), k);
#pragma unroll
      for (int j = 0; j < GV_COLS; ++j) s[i][j] = fma(a, B_AT(k, min(n0 + j, N - 1)), s[i][j]);
    }
#pragma unroll
  for (int i = 0; i < MR; ++i) {
    if (i >= M) break;
#pragma unroll
    for (int j = 0; j < GV_COLS; ++j) {
      const int n = n0 + j;
      if (n < N) {
        float v = alpha * s[i][j];
        if (beta != 0.0f) v += beta * C[(long)i * ldc + n];
#if BIAS == 1
        v += bias[bias_off + n];
#elif BIAS == 2
        v += bias[bias_off + i];
#endif
#if RESIDUAL
        v += R[(long)i * ldc + n];
#endif
        C[(long)i * ldc + n] = APPLY_ACT(v, act_a, act_b);
      }
    }
  }
}
