// Squeeze-excitation blocks (layers/se.hpp, formed by models/fusion_se.cpp): y = x * gate(x) per channel,
// gate = act2(W2 act1(W1 mean_hw(x) + b1) + b2), W1 [CR, C], W2 [C, CR]. Activations are ACT_* numbers
// (common.cl) passed at run time, so one build serves every block.

// w . v over n floats, as float8 strips (CPUs run a work-group's items as loops: explicit vectors are
// what vectorises the dot products there).
inline float se_dot(const __global float* w, const __local float* v, int n) {
  float8 acc = (float8)(0.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) acc = fma(vload8(0, w + i), vload8(0, v + i), acc);
  float s = ((acc.s0 + acc.s1) + (acc.s2 + acc.s3)) + ((acc.s4 + acc.s5) + (acc.s6 + acc.s7));
  for (; i < n; ++i) s = fma(w[i], v[i], s);
  return s;
}

// The channel means and both 1x1 convolutions, one work-group per image (channels spread over its
// work-items; the means and the hidden vector stay in local memory). With `write_y` the group also
// scales its image: y = x * gate, the whole block in one command (for maps small enough that one
// work-group's pass over them costs less than launching three more commands). Without it the group
// writes the gate [N, C]. With `pooled` (HW = 1), x holds the means already ([N, C], a parallel pool ran
// first) and only the gate is computed.
__kernel void se_block(int C, int CR, long HW, int act1, float a1, float b1, int act2, float a2, float b2, int write_y,
                       __global const float* x, long x_off, __global const float* w1, long w1_off,
                       __global const float* bias1, long bias1_off, __global const float* w2, long w2_off,
                       __global const float* bias2, long bias2_off, __global float* y, long y_off,
                       __local float* pooled, __local float* hid) {
  const int n = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
  x += x_off + (long)n * C * HW;
  w1 += w1_off;
  w2 += w2_off;
  bias1 += bias1_off;
  bias2 += bias2_off;
  const float inv = 1.0f / (float)HW;
  for (int c = lid; c < C; c += L) {
    // A plane per work-item, read as float8 strips (the plane's start need not be 32-byte aligned).
    const __global float* p = x + (long)c * HW;
    float8 acc = (float8)(0.0f);
    long i = 0;
    for (; i + 8 <= HW; i += 8) acc += vload8(0, p + i);
    float s = ((acc.s0 + acc.s1) + (acc.s2 + acc.s3)) + ((acc.s4 + acc.s5) + (acc.s6 + acc.s7));
    for (; i < HW; ++i) s += p[i];
    pooled[c] = s * inv;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int j = lid; j < CR; j += L) {
    hid[j] = cldl_act(act1, se_dot(w1 + (long)j * C, pooled, C) + bias1[j], a1, b1);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int c = lid; c < C; c += L) {
    const float g = cldl_act(act2, se_dot(w2 + (long)c * CR, hid, CR) + bias2[c], a2, b2);
    if (!write_y) {
      y[y_off + (long)n * C + c] = g;
      continue;
    }
    const __global float* p = x + (long)c * HW;
    __global float* q = y + y_off + ((long)n * C + c) * HW;
    long i = 0;
    for (; i + 8 <= HW; i += 8) vstore8(vload8(0, p + i) * g, 0, q + i);
    for (; i < HW; ++i) q[i] = p[i] * g;
  }
}

// y = x * gate[n, c]: dim 1 is the plane (N * C of them, each HW long), dim 0 strips of SE_STRIP floats
// of it (the large maps this serves have few planes: a plane per item left one core idle).
#define SE_STRIP 64
__kernel void se_scale(long HW, __global const float* x, long x_off, __global const float* gate, long gate_off,
                       __global float* y, long y_off) {
  const long pl = get_global_id(1), start = get_global_id(0) * SE_STRIP;
  if (start >= HW) return;
  const float g = gate[gate_off + pl];
  const __global float* p = x + x_off + pl * HW + start;
  __global float* q = y + y_off + pl * HW + start;
  const long n = min((long)SE_STRIP, HW - start);
  long i = 0;
  for (; i + 8 <= n; i += 8) vstore8(vload8(0, p + i) * g, 0, q + i);
  for (; i < n; ++i) q[i] = p[i] * g;
}
