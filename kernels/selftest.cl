// Small kernels the runtime uses to check a device works: fill and a*x+y.

__kernel void fill_f32(__global float* x, int off, float value, int n) {
  int i = get_global_id(0);
  if (i < n) x[off + i] = value;
}

__kernel void axpy_f32(__global const float* x, int xoff, __global float* y, int yoff, float a, int n) {
  int i = get_global_id(0);
  if (i < n) y[yoff + i] = a * x[xoff + i] + y[yoff + i];
}
