// 2-D pooling on NCHW: MaxPool (with dilation) and AveragePool (count_include_pad), and the global
// pools. Window parameters are runtime arguments, so one build serves every configuration.

// One work-item per output element; range (OW, OH, N*C). is_max: 1 max, 0 average. For average,
// include_pad divides by the window clipped to the padded input, else by the valid elements.
__kernel void pool2d(int is_max, int include_pad, int H, int W, int OH, int OW, int kh, int kw, int sh, int sw,
                     int dh, int dw, int pt, int pl, int pb, int pr, __global const float* x, long x_off,
                     __global float* y, long y_off) {
  const int ow = get_global_id(0), oh = get_global_id(1);
  const long nc = get_global_id(2);
  if (ow >= OW || oh >= OH) return;
  x += x_off + nc * H * W;
  const int h0 = oh * sh - pt, w0 = ow * sw - pl;
  float acc = is_max ? -INFINITY : 0.0f;
  int valid = 0;
  for (int i = 0; i < kh; ++i) {
    const int h = h0 + i * dh;
    if (h < 0 || h >= H) continue;
    for (int j = 0; j < kw; ++j) {
      const int w = w0 + j * dw;
      if (w < 0 || w >= W) continue;
      const float v = x[h * W + w];
      acc = is_max ? fmax(acc, v) : acc + v;
      ++valid;
    }
  }
  if (!is_max) {
    int div = valid;
    if (include_pad) div = (min(h0 + kh, H + pb) - h0) * (min(w0 + kw, W + pr) - w0);
    acc /= (float)div;
  }
  y[y_off + (nc * OH + oh) * OW + ow] = acc;
}

// Global pools: one work-group of `get_local_size(0)` (a power of two) per (n, c) plane reduces it
// in local memory.
__kernel void global_pool(int is_max, long plane, __global const float* x, long x_off, __global float* y,
                          long y_off, __local float* scratch) {
  const long nc = get_group_id(0);
  const int lid = get_local_id(0), ls = get_local_size(0);
  x += x_off + nc * plane;
  float acc = is_max ? -INFINITY : 0.0f;
  for (long i = lid; i < plane; i += ls) acc = is_max ? fmax(acc, x[i]) : acc + x[i];
  scratch[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = ls / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] = is_max ? fmax(scratch[lid], scratch[lid + s]) : scratch[lid] + scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) y[y_off + nc] = is_max ? scratch[0] : scratch[0] / (float)plane;
}
