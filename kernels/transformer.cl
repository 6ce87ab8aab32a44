// Transformer companions: LayerNormalization / RMSNormalization over the last axes (optionally fused
// with a residual add), rotary position embedding, embedding lookup (Gather rows) and SwiGLU.
//
// Macros (defaults correct on any device):
//   WG_SIZE   work-items per row in the norm kernels (a power of two; 1 is right for CPUs, where the
//             work-items of a group run one after another on one thread)
//   RMS       0 LayerNorm (subtract the mean, then scale and bias), 1 RMSNorm (scale only)
//   RESIDUAL  1: x = x + residual first, and the sum is stored to `sum_out` when that is given
//   IDS_LONG  embedding ids are int64 (else int32)

#ifndef WG_SIZE
#define WG_SIZE 1
#endif
#ifndef RMS
#define RMS 0
#endif
#ifndef RESIDUAL
#define RESIDUAL 0
#endif
#ifndef IDS_LONG
#define IDS_LONG 0
#endif

// Sum over the work-group; every work-item gets the result.
inline float wg_sum(float v, __local float* scratch) {
#if WG_SIZE == 1
  (void)scratch;
  return v;
#else
  const int lid = get_local_id(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = WG_SIZE / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);  // scratch is reused by the next call
  return r;
#endif
}

// One work-group per row of N elements; global (rows * WG_SIZE), local (WG_SIZE). Two passes over the
// row (mean, then centred variance) keep the fp32 result accurate for large means.
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void norm_rows(
    int N, float epsilon, __global const float* X, long x_off, __global const float* R, long r_off,
    __global float* sum_out, long sum_off, __global const float* scale, long scale_off, int has_bias, __global const float* bias,
    long bias_off, __global float* Y, long y_off, __global float* mean_out, long mean_off, __global float* inv_out,
    long inv_off) {
  __local float scratch[WG_SIZE];
  const long row = get_group_id(0);
  const int lid = get_local_id(0);
  X += x_off + row * N;
  Y += y_off + row * N;
#if RESIDUAL
  R += r_off + row * N;
  // The sum goes to Y first (then normalised in place), and to sum_out when the caller wants it.
  for (int i = lid; i < N; i += WG_SIZE) {
    const float v = X[i] + R[i];
    Y[i] = v;
    if (sum_out) sum_out[sum_off + row * N + i] = v;
  }
  barrier(CLK_GLOBAL_MEM_FENCE);
  X = Y;
#else
  (void)R, (void)r_off, (void)sum_out, (void)sum_off;
#endif
  float mean = 0.0f;
#if !RMS
  float s = 0.0f;
  for (int i = lid; i < N; i += WG_SIZE) s += X[i];
  mean = wg_sum(s, scratch) / N;
#endif
  float q = 0.0f;
  for (int i = lid; i < N; i += WG_SIZE) {
    const float d = X[i] - mean;
    q = fma(d, d, q);
  }
  const float inv = rsqrt(wg_sum(q, scratch) / N + epsilon);
  // ONNX LayerNormalization's optional Mean and InvStdDev outputs (one value per row).
  if (lid == 0 && mean_out) mean_out[mean_off + row] = mean;
  if (lid == 0 && inv_out) inv_out[inv_off + row] = inv;
  scale += scale_off;
  bias += bias_off;
  for (int i = lid; i < N; i += WG_SIZE) {
    float v = (X[i] - mean) * inv * scale[i];
#if !RMS
    if (has_bias) v += bias[i];
#endif
    Y[i] = v;
  }
}

// Rotary position embedding (ONNX RotaryEmbedding). x is addressed as b*sb + h*sh + s*ss + d; the
// first `rot` dims rotate, the rest are copied. cos/sin: [max_pos, rot/2] indexed by position_ids[b, s]
// when pos is given, else [B, S, rot/2]. Interleaved: pairs (2i, 2i+1); else halves (i, i + rot/2).
// Global (D, S, B*H).
__kernel void rotary_embedding(int H, int S, int D, int rot, int interleaved, __global const float* X, long x_off,
                               long sb, long sh, long ss, __global const float* cosc, long cos_off,
                               __global const float* sinc, long sin_off, __global const long* pos, long pos_off,
                               __global float* Y, long y_off) {
  const int d = get_global_id(0), s = get_global_id(1), bh = get_global_id(2);
  const int b = bh / H, h = bh % H;
  const long base = b * sb + h * sh + s * ss;
  const float x = X[x_off + base + d];
  if (d >= rot) {
    Y[y_off + base + d] = x;
    return;
  }
  const int hr = rot / 2;  // ("half" is a type in OpenCL C)
  const long cs_row = pos ? pos[pos_off + (long)b * S + s] * hr : ((long)b * S + s) * hr;
  int i, partner;
  float sign;
  if (interleaved) {
    i = d / 2;
    partner = d ^ 1;
    sign = (d & 1) ? 1.0f : -1.0f;
  } else {
    i = d < hr ? d : d - hr;
    partner = d < hr ? d + hr : d - hr;
    sign = d < hr ? -1.0f : 1.0f;
  }
  const float c = cosc[cos_off + cs_row + i], sn = sinc[sin_off + cs_row + i];
  Y[y_off + base + d] = x * c + sign * X[x_off + base + partner] * sn;
}

// Embedding lookup: out[n, :] = table[ids[n], :]; negative ids count from the end (ONNX Gather); ids
// outside [-V, V) give a zero row (a device kernel cannot throw; the layer documents it). Global (E, n).
__kernel void embedding_gather(int V, int E, __global const float* table, long t_off,
#if IDS_LONG
                               __global const long* ids,
#else
                               __global const int* ids,
#endif
                               long ids_off, __global float* out, long out_off) {
  const int e = get_global_id(0);
  const long n = get_global_id(1);
  long id = ids[ids_off + n];
  if (id < 0) id += V;
  out[out_off + n * E + e] = (id >= 0 && id < V) ? table[t_off + id * E + e] : 0.0f;
}

// SwiGLU: x [rows, 2F] -> y [rows, F] = silu(x[:, :F]) * x[:, F:]. Global (F, rows).
__kernel void swiglu(int F, __global const float* X, long x_off, __global float* Y, long y_off) {
  const int f = get_global_id(0);
  const long r = get_global_id(1);
  const float a = X[x_off + r * 2 * F + f], g = X[x_off + r * 2 * F + F + f];
  Y[y_off + r * F + f] = a / (1.0f + exp(-a)) * g;
}
