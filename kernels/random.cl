// Random sampling: Bernoulli. Counter-based, so any work-item order gives the same numbers: element i of
// run `stream` draws u = hash(seed, stream, i) uniform in [0, 1) with 24 random bits (the SplitMix64
// finaliser of the three words, mixed in turn), and y = u < p. The output type is a runtime code:
//   OUT_KIND  0 f32, 1 f64, 2 f16 (bits 0x3c00), 3 bf16 (bits 0x3f80), 4 integer or bool of OUT_SIZE bytes
// p is read as float (f32) or double (USE_FP64 with a double input).

#if USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T_P
#define T_P float
#endif

inline ulong rnd_mix(ulong z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9UL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebUL;
  return z ^ (z >> 31);
}

__kernel void bernoulli(ulong seed, ulong stream, long n, __global const T_P* p, long p_off, int out_kind, int out_size,
                        __global uchar* y, long y_off) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const ulong h = rnd_mix(rnd_mix(rnd_mix(seed + 0x9e3779b97f4a7c15UL) ^ stream) ^ (ulong)i);
  const float u = (float)(h >> 40) * (1.0f / 16777216.0f);
  const int one = (T_P)u < p[p_off + i];
  const long at = y_off + i;
  switch (out_kind) {
    case 0: ((__global float*)y)[at] = one ? 1.0f : 0.0f; break;
#if USE_FP64
    case 1: ((__global double*)y)[at] = one ? 1.0 : 0.0; break;
#endif
    case 2: ((__global ushort*)y)[at] = one ? 0x3c00 : 0; break;
    case 3: ((__global ushort*)y)[at] = one ? 0x3f80 : 0; break;
    default:
      switch (out_size) {
        case 1: y[at] = one; break;
        case 2: ((__global ushort*)y)[at] = one; break;
        case 4: ((__global uint*)y)[at] = one; break;
        default: ((__global ulong*)y)[at] = one; break;
      }
  }
}
