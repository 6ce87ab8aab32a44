// GEMM: C = act(alpha * op(A) * op(B) + beta * C + bias), row-major, strided batch on dimension 2.
// Macros: TRANS_A, TRANS_B (0/1), BIAS (0 none, 1 per column, 2 per row), ACT (see common.cl).

#ifndef TRANS_A
#define TRANS_A 0
#endif
#ifndef TRANS_B
#define TRANS_B 0
#endif
#ifndef BIAS
#define BIAS 0
#endif

#if TRANS_A
#define A_AT(m, k) A[(k) * lda + (m)]
#else
#define A_AT(m, k) A[(m) * lda + (k)]
#endif
#if TRANS_B
#define B_AT(k, n) B[(n) * ldb + (k)]
#else
#define B_AT(k, n) B[(k) * ldb + (n)]
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
