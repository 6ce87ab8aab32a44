// Squeeze-excitation blocks (layers/se.hpp, formed by models/fusion_se.cpp): y = x * gate(x) per channel,
// gate = act2(W2 act1(W1 mean_hw(x) + b1) + b2), W1 [CR, C], W2 [C, CR]. Activations are ACT_* numbers
// (common.cl) passed at run time, so one build serves every block.

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
    const __global float* w = w1 + (long)j * C;
    float s = 0.0f;
    for (int c = 0; c < C; ++c) s = fma(w[c], pooled[c], s);
    hid[j] = cldl_act(act1, s + bias1[j], a1, b1);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int c = lid; c < C; c += L) {
    const __global float* w = w2 + (long)c * CR;
    float s = 0.0f;
    for (int j = 0; j < CR; ++j) s = fma(w[j], hid[j], s);
    const float g = cldl_act(act2, s + bias2[c], a2, b2);
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

// y = x * gate[n, c] over all planes, a plane per work-item row: `planes` = N * C, each HW long.
__kernel void se_scale(long planes, long HW, __global const float* x, long x_off, __global const float* gate,
                       long gate_off, __global float* y, long y_off) {
  const long pl = get_global_id(0);
  if (pl >= planes) return;
  const float g = gate[gate_off + pl];
  const __global float* p = x + x_off + pl * HW;
  __global float* q = y + y_off + pl * HW;
  long i = 0;
  for (; i + 8 <= HW; i += 8) vstore8(vload8(0, p + i) * g, 0, q + i);
  for (; i < HW; ++i) q[i] = p[i] * g;
}
