// Softmax / LogSoftmax over one axis of a tensor viewed as (outer, len, inner); numerically stable
// (max subtracted before exp). is_log is a runtime argument so both ops share one build.

// inner == 1 (the last axis, the common case): one work-group per row, local-memory reductions.
__kernel void softmax_rows(int is_log, long len, __global const float* x, long x_off, __global float* y,
                           long y_off, __local float* scratch) {
  const long row = get_group_id(0);
  const int lid = get_local_id(0), ls = get_local_size(0);
  x += x_off + row * len;
  y += y_off + row * len;
  float m = -INFINITY;
  for (long i = lid; i < len; i += ls) m = fmax(m, x[i]);
  scratch[lid] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int k = ls / 2; k > 0; k >>= 1) {
    if (lid < k) scratch[lid] = fmax(scratch[lid], scratch[lid + k]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  m = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  float s = 0.0f;
  for (long i = lid; i < len; i += ls) s += exp(x[i] - m);
  scratch[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int k = ls / 2; k > 0; k >>= 1) {
    if (lid < k) scratch[lid] += scratch[lid + k];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  s = scratch[0];
  if (is_log) {
    const float ls_ = log(s);
    for (long i = lid; i < len; i += ls) y[i] = x[i] - m - ls_;
  } else {
    const float inv = 1.0f / s;
    for (long i = lid; i < len; i += ls) y[i] = exp(x[i] - m) * inv;
  }
}

// inner > 1: one work-item per (outer, inner) column; neighbours read neighbouring addresses.
__kernel void softmax_strided(int is_log, long len, long inner, __global const float* x, long x_off,
                              __global float* y, long y_off) {
  const long in = get_global_id(0), o = get_global_id(1);
  x += x_off + o * len * inner + in;
  y += y_off + o * len * inner + in;
  float m = -INFINITY;
  for (long k = 0; k < len; ++k) m = fmax(m, x[k * inner]);
  float s = 0.0f;
  for (long k = 0; k < len; ++k) s += exp(x[k * inner] - m);
  if (is_log) {
    const float ls_ = log(s);
    for (long k = 0; k < len; ++k) y[k * inner] = x[k * inner] - m - ls_;
  } else {
    const float inv = 1.0f / s;
    for (long k = 0; k < len; ++k) y[k * inner] = exp(x[k * inner] - m) * inv;
  }
}
