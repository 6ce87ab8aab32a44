// Normalisation: BatchNormalization (inference and training mode) and Instance / Group normalisation (statistics per
// (n, group) over a contiguous run of channels x spatial). Fused activation by -DACT (common.cl).

// BatchNorm inference: y = (x - mean) / sqrt(var + eps) * scale + bias, channel = dim 1. Range
// (spatial, N*C) so the per-channel parameters are loaded once per row.
__kernel void batch_norm(int C, long spatial, float eps, float act_a, float act_b, __global const float* x,
                         long x_off, __global const float* scale, long s_off, __global const float* bias,
                         long b_off, __global const float* mean, long m_off, __global const float* var,
                         long v_off, __global float* y, long y_off) {
  const long i = get_global_id(0);
  const long nc = get_global_id(1);
  const int c = (int)(nc % C);
  const float k = scale[s_off + c] * rsqrt(var[v_off + c] + eps);
  const float v = (x[x_off + nc * spatial + i] - mean[m_off + c]) * k + bias[b_off + c];
  y[y_off + nc * spatial + i] = APPLY_ACT(v, act_a, act_b);
}

// Sum of v over the work-group (local memory tree).
inline float group_sum(float v, __local float* s) {
  const int lid = get_local_id(0), ls = get_local_size(0);
  s[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int k = ls / 2; k > 0; k >>= 1) {
    if (lid < k) s[lid] += s[lid + k];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = s[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

// The batch mean and population variance of one channel (x at its first plane) over N x spatial, two passes.
// Each work-item walks its share of every image's channel plane: no div / mod per element.
inline void channel_stats(__global const float* x, int N, long spatial, long plane, __local float* scratch, float* m,
                          float* v) {
  const int lid = get_local_id(0), ls = get_local_size(0);
  const float count = (float)((long)N * spatial);
  float s = 0.0f;
  for (int n = 0; n < N; ++n)
    for (long i = lid; i < spatial; i += ls) s += x[n * plane + i];
  *m = group_sum(s, scratch) / count;
  float ss = 0.0f;
  for (int n = 0; n < N; ++n)
    for (long i = lid; i < spatial; i += ls) {
      const float d = x[n * plane + i] - *m;
      ss += d * d;
    }
  *v = group_sum(ss, scratch) / count;
}

// BatchNorm training (ONNX training_mode 1): one work-group per channel c computes the batch mean and
// (population) variance over N x spatial in two passes, normalises with them, and writes the running
// statistics input * momentum + batch * (1 - momentum) when asked (write_mean / write_var).
__kernel void batch_norm_train(int N, int C, long spatial, float eps, float momentum, int write_mean,
                               int write_var, float act_a, float act_b, __global const float* x, long x_off,
                               __global const float* scale, long s_off, __global const float* bias, long b_off,
                               __global const float* mean, long m_off, __global const float* var, long v_off,
                               __global float* y, long y_off, __global float* run_mean, long rm_off,
                               __global float* run_var, long rv_off, __local float* scratch) {
  const int c = get_group_id(0);
  const int lid = get_local_id(0), ls = get_local_size(0);
  const long plane = (long)C * spatial;
  x += x_off + c * spatial;
  y += y_off + c * spatial;
  float m, v;
  channel_stats(x, N, spatial, plane, scratch, &m, &v);
  const float k = scale[s_off + c] * rsqrt(v + eps), b = bias[b_off + c];
  for (int n = 0; n < N; ++n)
    for (long i = lid; i < spatial; i += ls) y[n * plane + i] = APPLY_ACT((x[n * plane + i] - m) * k + b, act_a, act_b);
  if (lid == 0 && write_mean) run_mean[rm_off + c] = mean[m_off + c] * momentum + m * (1.0f - momentum);
  if (lid == 0 && write_var) run_var[rv_off + c] = var[v_off + c] * momentum + v * (1.0f - momentum);
}

// Group norm: one work-group per (n, g) whose `len` = (C / G) * spatial elements are contiguous.
// Two passes for the statistics (mean, then centred sum of squares) keep the variance accurate; a third
// writes. scale/bias index: channel c, or c / cpg when per_group (opset-18 GroupNormalization).
__kernel void group_norm(int G, int cpg, long spatial, int per_group, float eps, float act_a, float act_b,
                         __global const float* x, long x_off, __global const float* scale, long s_off,
                         __global const float* bias, long b_off, __global float* y, long y_off,
                         __local float* scratch) {
  const long ng = get_group_id(0);
  const int lid = get_local_id(0), ls = get_local_size(0);
  const long len = cpg * spatial;
  x += x_off + ng * len;
  y += y_off + ng * len;
  float s = 0.0f;
  for (long i = lid; i < len; i += ls) s += x[i];
  const float mean = group_sum(s, scratch) / (float)len;
  float ss = 0.0f;
  for (long i = lid; i < len; i += ls) {
    const float d = x[i] - mean;
    ss += d * d;
  }
  const float inv = rsqrt(group_sum(ss, scratch) / (float)len + eps);
  const int g = (int)(ng % G);
  for (long i = lid; i < len; i += ls) {
    const int c = g * cpg + (int)(i / spatial);
    const int p = per_group ? g : c;
    const float v = (x[i] - mean) * inv * scale[s_off + p] + bias[b_off + p];
    y[i] = APPLY_ACT(v, act_a, act_b);
  }
}

// LRN across channels (ONNX): y = x / (bias + alpha / size * sum of x^2 over channels
// max(0, c - (size-1)/2) .. min(C-1, c + size/2))^beta. Range (spatial, N*C); the window sum is short
// (size channels), so each item sums its own.
__kernel void lrn(int C, long spatial, int size, float alpha, float beta, float bias, __global const float* x,
                  long x_off, __global float* y, long y_off) {
  const long i = get_global_id(0);
  const long nc = get_global_id(1);
  const int c = (int)(nc % C);
  const long base = x_off + (nc - c) * spatial + i;
  const int lo = max(0, c - (size - 1) / 2), hi = min(C - 1, c + size / 2);
  float s = 0.0f;
  for (int k = lo; k <= hi; ++k) {
    const float v = x[base + (long)k * spatial];
    s += v * v;
  }
  y[y_off + nc * spatial + i] = x[base + (long)c * spatial] / pow(bias + alpha / (float)size * s, beta);
}

// LpNormalization (mode 1: L1, 2: L2) and MeanVarianceNormalization (mode 0) over a set of axes: one work-item per
// statistic. keep_* are the kept dims (input strides) in row-major order, red_* the reduced ones; nd_offset
// (common.cl) turns a flat index into an element offset. Lp: y = x / ||x|| (0 where the norm is 0, as the ONNX
// reference does); MVN: y = (x - mean) / (std + 1e-9), the population std from a second pass over x - mean.
__kernel void normalize_axes(int mode, int keep_rank, long8 keep_dims, long8 keep_strides, int red_rank,
                             long8 red_dims, long8 red_strides, long count, __global const float* x, long x_off,
                             __global float* y, long y_off) {
  const long base = nd_offset(get_global_id(0), keep_rank, keep_dims, keep_strides);
  x += x_off + base;
  y += y_off + base;
  float acc = 0.0f;
  for (long r = 0; r < count; ++r) {
    const float v = x[nd_offset(r, red_rank, red_dims, red_strides)];
    acc += mode == 1 ? fabs(v) : mode == 2 ? v * v : v;
  }
  float shift = 0.0f, denom;
  if (mode == 0) {
    shift = acc / (float)count;
    float sq = 0.0f;
    for (long r = 0; r < count; ++r) {
      const float d = x[nd_offset(r, red_rank, red_dims, red_strides)] - shift;
      sq += d * d;
    }
    denom = sqrt(sq / (float)count) + 1e-9f;
  } else {
    denom = mode == 2 ? sqrt(acc) : acc;
  }
  for (long r = 0; r < count; ++r) {
    const long o = nd_offset(r, red_rank, red_dims, red_strides);
    y[o] = denom == 0.0f ? 0.0f : (x[o] - shift) / denom;
  }
}

// BatchNormalization's training-mode backward in one launch (BatchNormGrad, layers/backward.cpp): one work-group per
// channel c recomputes the batch mean and population variance over N x spatial (two passes, as batch_norm_train), then
// sums dy and dy * xhat, writes dbias, dscale and dx = scale / sqrt(var + eps) * (dy - sum(dy) / n
// - xhat sum(dy xhat) / n). Fixed-order local-memory sums: the same bits every run.
__kernel void batch_norm_grad(int N, int C, long spatial, float eps, __global const float* dy, long dy_off,
                              __global const float* x, long x_off, __global const float* scale, long s_off,
                              __global float* dx, long dx_off, __global float* dscale, long ds_off,
                              __global float* dbias, long db_off, __local float* scratch) {
  const int c = get_group_id(0);
  const int lid = get_local_id(0), ls = get_local_size(0);
  const long count = (long)N * spatial, plane = (long)C * spatial;
  x += x_off + c * spatial;
  dy += dy_off + c * spatial;
  dx += dx_off + c * spatial;
  float m, v;
  channel_stats(x, N, spatial, plane, scratch, &m, &v);
  const float inv = 1.0f / sqrt(v + eps);
  float g = 0.0f, gx = 0.0f;
  for (int n = 0; n < N; ++n)
    for (long i = lid; i < spatial; i += ls) {
      const float d = dy[n * plane + i];
      g += d;
      gx += d * (x[n * plane + i] - m) * inv;
    }
  const float sum_dy = group_sum(g, scratch), sum_dyx = group_sum(gx, scratch);
  if (lid == 0) {
    dbias[db_off + c] = sum_dy;
    dscale[ds_off + c] = sum_dyx;
  }
  const float k = scale[s_off + c] * inv, mean_dy = sum_dy / (float)count, mean_dyx = sum_dyx / (float)count;
  for (int n = 0; n < N; ++n)
    for (long i = lid; i < spatial; i += ls) {
      const long at = n * plane + i;
      dx[at] = k * (dy[at] - mean_dy - (x[at] - m) * inv * mean_dyx);
    }
}
