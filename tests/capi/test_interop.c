/* OpenCL interop from C: the app owns the cl_context and in-order queue; an app kernel writes the
 * model's input buffer, the model reads it in place and writes its output into an app buffer, and an
 * app kernel consumes that, all ordered by events with no host copy in between. Two rounds are queued
 * back to back before the host waits once; both are checked against the C reference.
 * Usage: cldl_test_interop MODEL_DIR */
#include <stdint.h>

#include "mlp_ref.h"
#include "test_util.h"

#define BATCH 3
#define OUT_OFFSET 64 /* bytes: the model's output lands inside the app's buffer at an offset */

static const char* kSource =
    "__kernel void fill(__global float* x, float s) {\n"
    "  int i = get_global_id(0);\n"
    "  x[i] = (float)((i * 7) % 13) * 0.25f * s - 1.5f;\n"
    "}\n"
    "__kernel void consume(__global const float* y, int offset, __global float* z) {\n"
    "  int i = get_global_id(0);\n"
    "  z[i] = y[offset + i] * 2.0f + 1.0f;\n"
    "}\n";

#define CL_OK(call)                                                                     \
  do {                                                                                  \
    cl_int e_ = (call);                                                                 \
    if (e_ != CL_SUCCESS) {                                                             \
      fprintf(stderr, "%s:%d: %s -> OpenCL error %d\n", __FILE__, __LINE__, #call, e_); \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

int main(int argc, char** argv) {
  char path[4096];
  size_t index = 0, nx = BATCH * MLP_IN, ny = BATCH * MLP_OUT, i;
  const char* spec = getenv("CLDL_DEVICE");
  cldl_device_info dev;
  cl_int err;
  cl_context clctx, other_ctx;
  cl_command_queue queue, got_queue = NULL;
  cl_program prog;
  cl_kernel fill, consume;
  cl_mem X, Y, XV, Z[2], foreign;
  cl_event filled, ran, consumed[2];
  cldl_context ctx;
  cldl_model model;
  cldl_session s;
  const char* names[1] = {"batch"};
  int64_t values[1] = {BATCH};
  cldl_load_options opts;
  float scale[2] = {1.f, -0.75f}, x[BATCH * MLP_IN], want[BATCH * MLP_OUT], z[BATCH * MLP_OUT], xv[BATCH * MLP_IN];
  int round, offset_elems = OUT_OFFSET / 4;

  if (argc != 2) return 2;
  snprintf(path, sizeof path, "%s/mlp.onnx", argv[1]);

  /* The app's own OpenCL objects, on the device cldl's spec names. */
  OK(cldl_device_select(spec ? spec : "cpu", &index));
  dev.struct_size = sizeof dev;
  OK(cldl_device_get_info(index, &dev));
  clctx = clCreateContext(NULL, 1, &dev.device, NULL, NULL, &err);
  CL_OK(err);
  queue = clCreateCommandQueue(clctx, dev.device, 0, &err);
  CL_OK(err);
  prog = clCreateProgramWithSource(clctx, 1, &kSource, NULL, &err);
  CL_OK(err);
  CL_OK(clBuildProgram(prog, 1, &dev.device, "", NULL, NULL));
  fill = clCreateKernel(prog, "fill", &err);
  CL_OK(err);
  consume = clCreateKernel(prog, "consume", &err);
  CL_OK(err);
  X = clCreateBuffer(clctx, CL_MEM_READ_WRITE, nx * sizeof(float), NULL, &err);
  CL_OK(err);
  Y = clCreateBuffer(clctx, CL_MEM_READ_WRITE, OUT_OFFSET + ny * sizeof(float), NULL, &err);
  CL_OK(err);
  XV = clCreateBuffer(clctx, CL_MEM_READ_WRITE, nx * sizeof(float), NULL, &err);
  CL_OK(err);
  for (round = 0; round < 2; ++round) {
    Z[round] = clCreateBuffer(clctx, CL_MEM_READ_WRITE, ny * sizeof(float), NULL, &err);
    CL_OK(err);
  }

  /* cldl on the app's context and queue. */
  OK(cldl_context_wrap(clctx, queue, &ctx));
  OK(cldl_context_cl(ctx, NULL, &got_queue));
  CHECK(got_queue == queue);
  cldl_load_options_init(&opts);
  opts.dim_count = 1;
  opts.dim_names = names;
  opts.dim_values = values;
  OK(cldl_model_load(ctx, path, &opts, &model));
  OK(cldl_session_create(model, &s));
  OK(cldl_session_bind_input(s, "x", X, 0));
  OK(cldl_session_bind_output(s, "y", Y, OUT_OFFSET));
  OK(cldl_session_bind_output(s, "x_view", XV, 0)); /* not produced by a kernel: a device copy */

  /* Buffers of another context, bad offsets and too-small buffers are refused. */
  other_ctx = clCreateContext(NULL, 1, &dev.device, NULL, NULL, &err);
  CL_OK(err);
  foreign = clCreateBuffer(other_ctx, CL_MEM_READ_WRITE, nx * sizeof(float), NULL, &err);
  CL_OK(err);
  FAILS(cldl_session_bind_input(s, "x", foreign, 0), CLDL_ERROR_INVALID_ARGUMENT, "another cl_context");
  FAILS(cldl_session_bind_input(s, "x", X, 2), CLDL_ERROR_INVALID_ARGUMENT, "multiple of the element size");
  /* A buffer too small for the run's shape: refused at the run, naming both sizes. */
  OK(cldl_session_bind_input(s, "x", X, 4));
  FAILS(cldl_session_run(s), CLDL_ERROR_SHAPE, "at offset 4 the app's buffer of");
  OK(cldl_session_bind_input(s, "x", X, 0));
  {
    int64_t bigger[2] = {BATCH + 1, MLP_IN};
    OK(cldl_session_set_input_shape(s, "x", bigger, 2));
    FAILS(cldl_session_run(s), CLDL_ERROR_SHAPE, "'x': the run's f32 [");
    bigger[0] = BATCH;
    OK(cldl_session_set_input_shape(s, "x", bigger, 2));
  }
  FAILS(cldl_session_bind_output(s, "nope", Y, 0), CLDL_ERROR_NOT_FOUND, "'nope' is not an output");

  /* Two rounds, queued back to back: fill -> model -> consume, ordered only by events. */
  for (round = 0; round < 2; ++round) {
    size_t gx = nx, gy = ny;
    CL_OK(clSetKernelArg(fill, 0, sizeof X, &X));
    CL_OK(clSetKernelArg(fill, 1, sizeof(float), &scale[round]));
    CL_OK(clEnqueueNDRangeKernel(queue, fill, 1, NULL, &gx, NULL, 0, NULL, &filled));
    OK(cldl_session_enqueue(s, 1, &filled, &ran));
    CL_OK(clSetKernelArg(consume, 0, sizeof Y, &Y));
    CL_OK(clSetKernelArg(consume, 1, sizeof(int), &offset_elems));
    CL_OK(clSetKernelArg(consume, 2, sizeof Z[round], &Z[round]));
    CL_OK(clEnqueueNDRangeKernel(queue, consume, 1, NULL, &gy, NULL, 1, &ran, &consumed[round]));
    clReleaseEvent(filled);
    clReleaseEvent(ran);
  }
  CL_OK(clWaitForEvents(2, consumed));

  for (round = 0; round < 2; ++round) {
    for (i = 0; i < nx; ++i) x[i] = (float)((int)(i * 7) % 13) * 0.25f * scale[round] - 1.5f;
    mlp_reference(x, BATCH, want);
    for (i = 0; i < ny; ++i) want[i] = want[i] * 2.f + 1.f;
    CL_OK(clEnqueueReadBuffer(queue, Z[round], CL_TRUE, 0, ny * sizeof(float), z, 0, NULL, NULL));
    CHECK(close_all(z, want, ny, 1e-5f));
    clReleaseEvent(consumed[round]);
  }
  /* x_view holds the last round's input; the host read path sees the bound output too. */
  CL_OK(clEnqueueReadBuffer(queue, XV, CL_TRUE, 0, nx * sizeof(float), xv, 0, NULL, NULL));
  CHECK(close_all(xv, x, nx, 0.f));
  OK(cldl_session_get_output(s, "y", z, sizeof z));
  mlp_reference(x, BATCH, want);
  CHECK(close_all(z, want, ny, 1e-5f));

  /* copy_output: a device copy into another app buffer, ordered after the last run. */
  {
    cl_event copied;
    float y2[BATCH * MLP_OUT];
    OK(cldl_session_copy_output(s, "y", Z[0], 0, 0, NULL, &copied));
    CL_OK(clEnqueueReadBuffer(queue, Z[0], CL_TRUE, 0, ny * sizeof(float), y2, 1, &copied, NULL));
    CHECK(close_all(y2, want, ny, 1e-5f));
    clReleaseEvent(copied);
  }

  OK(cldl_session_release(s));
  OK(cldl_model_release(model));
  OK(cldl_context_release(ctx));
  clReleaseMemObject(foreign);
  clReleaseContext(other_ctx);
  clReleaseMemObject(X);
  clReleaseMemObject(Y);
  clReleaseMemObject(XV);
  clReleaseMemObject(Z[0]);
  clReleaseMemObject(Z[1]);
  clReleaseKernel(fill);
  clReleaseKernel(consume);
  clReleaseProgram(prog);
  clReleaseCommandQueue(queue);
  clReleaseContext(clctx);
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("interop ok on %s\n", dev.name);
  return 0;
}
