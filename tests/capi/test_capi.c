/* The C API from C: devices, loading (file and memory, symbolic dims), tensor info, host runs checked
 * against a C reference, asynchronous runs, and the error paths (codes and messages); staged plans
 * (NonZero, an If and a Loop trip count on run-time data) with host and bound buffers.
 * Usage: cldl_test_capi MODEL_DIR */
#define _POSIX_C_SOURCE 200112L
#include <pthread.h>
#include <time.h>

#include "mlp_ref.h"
#include "test_util.h"

static volatile int g_callback_status = -1;
static void on_done(cldl_session s, cldl_status status, void* user) {
  (void)s;
  *(int*)user += 1;
  g_callback_status = (int)status;
}

/* One thread's work: its own session of a shared model, several runs with its own inputs. */
typedef struct {
  cldl_model model;
  int seed, ok;
} thread_job;

static void* run_thread(void* p) {
  thread_job* job = (thread_job*)p;
  cldl_session s;
  float x[3 * MLP_IN], y[3 * MLP_OUT], want[3 * MLP_OUT];
  int64_t dims[2] = {3, MLP_IN};
  int k, i;
  job->ok = 0;
  if (cldl_session_create(job->model, &s) != CLDL_OK) return NULL;
  for (k = 0; k < 5; ++k) {
    for (i = 0; i < 3 * MLP_IN; ++i) x[i] = (float)((i * (job->seed + 3) + k) % 11 - 5) * 0.25f;
    mlp_reference(x, 3, want);
    if (cldl_session_set_input(s, "x", CLDL_F32, dims, 2, x, sizeof x) || cldl_session_run(s) ||
        cldl_session_get_output(s, "y", y, sizeof y) || !close_all(y, want, 3 * MLP_OUT, 1e-5f)) {
      fprintf(stderr, "thread %d, run %d: %s\n", job->seed, k, cldl_last_error());
      cldl_session_release(s);
      return NULL;
    }
  }
  job->ok = cldl_session_release(s) == CLDL_OK;
  return NULL;
}

static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  char* data;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  data = malloc(*size);
  if (fread(data, 1, *size, f) != *size) {
    free(data);
    data = NULL;
  }
  fclose(f);
  return data;
}

static cldl_load_options batch_options(const char* const* names, const int64_t* values) {
  cldl_load_options o;
  cldl_load_options_init(&o);
  o.dim_count = 1;
  o.dim_names = names;
  o.dim_values = values;
  return o;
}

/* ---- Staged plans: decisions from run-time data (docs/dynamic-shapes.md), models by make_models.cpp ---- */

/* An app buffer of `bytes` filled with the byte `fill` (a sentinel that a run must not overwrite past its
 * output). */
static cl_mem app_buffer(cl_context clctx, cl_command_queue q, size_t bytes, int fill) {
  cl_int err = CL_SUCCESS;
  cl_mem m = clCreateBuffer(clctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
  unsigned char* init = malloc(bytes);
  CHECK(err == CL_SUCCESS && m != NULL && init != NULL);
  memset(init, fill, bytes);
  CHECK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, bytes, init, 0, NULL, NULL) == CL_SUCCESS);
  free(init);
  return m;
}

/* An app buffer holding `bytes` of `data`. */
static cl_mem app_input(cl_context clctx, cl_command_queue q, const void* data, size_t bytes) {
  cl_mem m = app_buffer(clctx, q, bytes, 0);
  CHECK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, bytes, data, 0, NULL, NULL) == CL_SUCCESS);
  return m;
}

/* MODEL_DIR/name loaded (no load options) and a session on it. */
static void open_model(cldl_context ctx, const char* dir, const char* name, cldl_model* model, cldl_session* s) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  OK(cldl_model_load(ctx, path, NULL, model));
  OK(cldl_session_create(*model, s));
}

/* Input "x" (f32 [n]) from host memory, or when `bound` from an app buffer (*xb) with output `out` bound
 * to an app buffer of `out_bytes` (*ob); both NULL when not bound. */
static void set_x(cldl_session s, cl_context clctx, cl_command_queue q, int bound, const float* x, int64_t n,
                  const char* out, size_t out_bytes, cl_mem* xb, cl_mem* ob) {
  *xb = *ob = NULL;
  if (!bound) {
    OK(cldl_session_set_input(s, "x", CLDL_F32, &n, 1, x, (size_t)n * sizeof(float)));
    return;
  }
  *xb = app_input(clctx, q, x, (size_t)n * sizeof(float));
  *ob = app_buffer(clctx, q, out_bytes, 0);
  OK(cldl_session_bind_input(s, "x", *xb, 0));
  OK(cldl_session_set_input_shape(s, "x", &n, 1));
  OK(cldl_session_bind_output(s, out, *ob, 0));
}

static void close_model(cldl_model model, cldl_session s) {
  OK(cldl_session_release(s));
  OK(cldl_model_release(model));
}

static void read_app_buffer(cl_command_queue q, cl_mem m, size_t bytes, void* out) {
  CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, bytes, out, 0, NULL, NULL) == CL_SUCCESS);
}

/* The session's last output `name`: its rank and dims as `rank`, `d0`, `d1`, and bytes. */
static int output_is(cldl_session s, const char* name, size_t rank, int64_t d0, int64_t d1, size_t bytes) {
  cldl_tensor_info info;
  info.struct_size = sizeof info;
  if (cldl_session_output_info(s, name, &info) != CLDL_OK) return 0;
  if (info.rank != rank || info.bytes != bytes || (rank > 0 && info.dims[0] != d0) ||
      (rank > 1 && info.dims[1] != d1)) {
    fprintf(stderr, "output '%s': rank %zu, dims %lld %lld, %zu bytes; want rank %zu, %lld %lld, %zu bytes\n", name,
            info.rank, info.rank > 0 ? (long long)info.dims[0] : -1LL, info.rank > 1 ? (long long)info.dims[1] : -1LL,
            info.bytes, rank, (long long)d0, (long long)d1, bytes);
    return 0;
  }
  return 1;
}

#define NZ_MAX 64

/* nonzero.onnx: nz = NonZero(x) [2, count] in row-major order, vals = x[nz] * w (w of 1 element). */
static size_t nonzero_reference(const float* x, int64_t r, int64_t c, float w, int64_t* nz, float* vals) {
  size_t count = 0, k;
  int64_t i, j;
  for (i = 0; i < r; ++i)
    for (j = 0; j < c; ++j)
      if (x[i * c + j] != 0.f) {
        vals[count] = x[i * c + j] * w;
        nz[count] = i; /* row 0 of nz for now: rows 0 and 1 are laid out below */
        nz[NZ_MAX + count] = j;
        ++count;
      }
  for (k = 0; k < count; ++k) nz[count + k] = nz[NZ_MAX + k];
  return count;
}

static void staged_nonzero(cldl_context ctx, cl_context clctx, cl_command_queue q, const char* dir) {
  cldl_model model;
  cldl_session s;
  /* Shapes and zero patterns: odd sizes, a 1 x 1, a count of 0 and the full count. */
  static const int64_t shapes[][2] = {{3, 5}, {1, 1}, {4, 7}, {2, 3}, {6, 9}, {3, 5}};
  int run, bound;
  float x[NZ_MAX], vals[NZ_MAX], want_vals[NZ_MAX], w = 1.5f;
  int64_t nz[2 * NZ_MAX], want_nz[2 * NZ_MAX], one[1] = {1};
  open_model(ctx, dir, "nonzero.onnx", &model, &s);
  OK(cldl_session_set_input(s, "w", CLDL_F32, one, 1, &w, sizeof w));
  FAILS(cldl_session_enqueue(s, 0, NULL, NULL), CLDL_ERROR_SHAPE, "input 'x'"); /* no x yet */
  for (bound = 0; bound < 2; ++bound)
    for (run = 0; run < (int)(sizeof shapes / sizeof shapes[0]); ++run) {
      int64_t r = shapes[run][0], c = shapes[run][1], dims[2];
      size_t n = (size_t)(r * c), count, i;
      cl_mem xb = NULL, nzb = NULL, vb = NULL;
      dims[0] = r;
      dims[1] = c;
      for (i = 0; i < n; ++i) {
        int v = (int)((i * 7 + (size_t)run * 3 + (size_t)bound) % 5) - 2; /* about 1 in 5 zeros */
        x[i] = run == 1 && bound == 0 ? 0.f : run == 3 ? (float)(i + 1) : (float)v * 0.75f;
      }
      count = nonzero_reference(x, r, c, w, want_nz, want_vals);
      if (bound) { /* x from the app's buffer, nz and vals into the app's buffers (room for every element) */
        xb = app_input(clctx, q, x, n * sizeof(float));
        nzb = app_buffer(clctx, q, 2 * n * sizeof(int64_t), 0x7f);
        vb = app_buffer(clctx, q, n * sizeof(float), 0x7f);
        OK(cldl_session_bind_input(s, "x", xb, 0));
        OK(cldl_session_set_input_shape(s, "x", dims, 2));
        OK(cldl_session_bind_output(s, "nz", nzb, 0));
        OK(cldl_session_bind_output(s, "vals", vb, 0));
      } else {
        OK(cldl_session_set_input(s, "x", CLDL_F32, dims, 2, x, n * sizeof(float)));
      }
      OK(cldl_session_run(s));
      CHECK(output_is(s, "nz", 2, 2, (int64_t)count, 2 * count * sizeof(int64_t)));
      CHECK(output_is(s, "vals", 1, (int64_t)count, 0, count * sizeof(float)));
      memset(nz, 0, sizeof nz);
      OK(cldl_session_get_output(s, "nz", nz, sizeof nz));
      CHECK(memcmp(nz, want_nz, 2 * count * sizeof(int64_t)) == 0);
      OK(cldl_session_get_output(s, "vals", vals, sizeof vals));
      CHECK(close_all(vals, want_vals, count, 0.f));
      if (bound) {
        unsigned char tail[sizeof(float)];
        memset(nz, 0, sizeof nz);
        read_app_buffer(q, nzb, 2 * n * sizeof(int64_t), nz);
        CHECK(memcmp(nz, want_nz, 2 * count * sizeof(int64_t)) == 0);
        read_app_buffer(q, vb, n * sizeof(float), vals);
        CHECK(close_all(vals, want_vals, count, 0.f));
        if (count < n) { /* past the real output: untouched */
          memcpy(tail, (unsigned char*)vals + count * sizeof(float), sizeof tail);
          CHECK(tail[0] == 0x7f && tail[3] == 0x7f);
        }
        OK(cldl_session_bind_input(s, "x", NULL, 0));
        OK(cldl_session_bind_output(s, "nz", NULL, 0));
        OK(cldl_session_bind_output(s, "vals", NULL, 0));
        clReleaseMemObject(xb);
        clReleaseMemObject(nzb);
        clReleaseMemObject(vb);
      }
    }
  /* A bound output too small for the count the data decided: CLDL_ERROR_SHAPE naming both sizes; the
   * outputs stay readable in their real shape, and the next call succeeds. */
  {
    int64_t dims[2] = {2, 3};
    size_t count, i;
    cl_mem small = app_buffer(clctx, q, 2 * sizeof(float), 0);
    for (i = 0; i < 6; ++i) x[i] = (float)i - 1.f; /* one zero: count 5 */
    count = nonzero_reference(x, 2, 3, w, want_nz, want_vals);
    CHECK(count == 5);
    OK(cldl_session_set_input(s, "x", CLDL_F32, dims, 2, x, 6 * sizeof(float)));
    OK(cldl_session_bind_output(s, "vals", small, 0));
    FAILS(cldl_session_run(s), CLDL_ERROR_SHAPE,
          "'vals': the run's f32 [5] is 20 bytes; at offset 0 the app's buffer of 8 bytes");
    CHECK(output_is(s, "vals", 1, 5, 0, 5 * sizeof(float)));
    OK(cldl_session_get_output(s, "vals", vals, sizeof vals));
    CHECK(close_all(vals, want_vals, count, 0.f));
    OK(cldl_session_bind_output(s, "vals", NULL, 0));
    OK(cldl_session_run(s));
    OK(cldl_session_get_output(s, "vals", vals, sizeof vals));
    CHECK(close_all(vals, want_vals, count, 0.f));
    /* A device copy of the staged run's output into an app buffer: too small, then at an offset. */
    FAILS(cldl_session_copy_output(s, "vals", small, 0, 0, NULL, NULL), CLDL_ERROR_SHAPE, "20 bytes");
    clReleaseMemObject(small);
    {
      cl_mem big = app_buffer(clctx, q, 8 * sizeof(float), 0);
      cl_event copied = NULL;
      float got[8];
      OK(cldl_session_copy_output(s, "vals", big, 2 * sizeof(float), 0, NULL, &copied));
      CHECK(clWaitForEvents(1, &copied) == CL_SUCCESS);
      clReleaseEvent(copied);
      read_app_buffer(q, big, sizeof got, got);
      CHECK(close_all(got + 2, want_vals, count, 0.f));
      clReleaseMemObject(big);
    }
    /* A shape the graph cannot take, known only from the data: w of 3 elements against a count of 5 (a
     * broadcast mismatch in the plan of the rest); the session goes on. */
    {
      float w3[3] = {1.f, 2.f, 3.f};
      int64_t three[1] = {3};
      OK(cldl_session_set_input(s, "w", CLDL_F32, three, 1, w3, sizeof w3));
      FAILS(cldl_session_run(s), CLDL_ERROR_SHAPE, "Mul");
      CHECK(strstr(cldl_last_error(), "w: [3]") != NULL);
      CHECK(strstr(cldl_last_error(), "x: [2, 3]") != NULL);
      FAILS(cldl_session_output_info(s, "vals", NULL), CLDL_ERROR_INVALID_ARGUMENT, "failed");
    }
    OK(cldl_session_set_input(s, "w", CLDL_F32, one, 1, &w, sizeof w));
    OK(cldl_session_run(s));
    CHECK(output_is(s, "vals", 1, 5, 0, 5 * sizeof(float)));
    OK(cldl_session_get_output(s, "vals", vals, sizeof vals));
    CHECK(close_all(vals, want_vals, count, 0.f));
  }
  /* Enqueued and asynchronous runs return before the run ends: they refuse a staged plan, naming it. */
  FAILS(cldl_session_enqueue(s, 0, NULL, NULL), CLDL_ERROR_MODEL, "cldl_session_run");
  FAILS(cldl_session_run_async(s, on_done, NULL), CLDL_ERROR_MODEL, "cldl_session_run");
  close_model(model, s);
}

/* if_data.onnx: sum(x) > 0 ? x as [n/2, 2] : -x as [2, n/2]. */
static void staged_if(cldl_context ctx, cl_context clctx, cl_command_queue q, const char* dir) {
  cldl_model model;
  cldl_session s;
  static const int64_t sizes[] = {6, 4, 10, 2, 6, 12};
  int run, bound;
  float x[16], y[16], want[16];
  open_model(ctx, dir, "if_data.onnx", &model, &s);
  for (bound = 0; bound < 2; ++bound)
    for (run = 0; run < (int)(sizeof sizes / sizeof sizes[0]); ++run) {
      int64_t n = sizes[run];
      size_t i;
      float sum = 0.f;
      unsigned char positive = 0;
      cl_mem xb, yb;
      for (i = 0; i < (size_t)n; ++i) {
        x[i] = (float)((int)((i * 5 + (size_t)run) % 7) - 3) * 0.5f + (run % 2 ? -1.f : 0.25f);
        sum += x[i];
      }
      for (i = 0; i < (size_t)n; ++i) want[i] = sum > 0.f ? x[i] : -x[i];
      set_x(s, clctx, q, bound, x, n, "y", (size_t)n * sizeof(float), &xb, &yb);
      OK(cldl_session_run(s));
      if (sum > 0.f)
        CHECK(output_is(s, "y", 2, n / 2, 2, (size_t)n * sizeof(float)));
      else
        CHECK(output_is(s, "y", 2, 2, n / 2, (size_t)n * sizeof(float)));
      OK(cldl_session_get_output(s, "positive", &positive, 1));
      CHECK(positive == (sum > 0.f));
      OK(cldl_session_get_output(s, "y", y, (size_t)n * sizeof(float)));
      CHECK(close_all(y, want, (size_t)n, 0.f));
      if (bound) {
        read_app_buffer(q, yb, (size_t)n * sizeof(float), y);
        CHECK(close_all(y, want, (size_t)n, 0.f));
        OK(cldl_session_bind_input(s, "x", NULL, 0));
        OK(cldl_session_bind_output(s, "y", NULL, 0));
        clReleaseMemObject(xb);
        clReleaseMemObject(yb);
      }
    }
  /* n = 5: the branch's Reshape does not divide (planned only once the condition is read back); the
   * error names the node, the shapes and the input, and the session goes on. */
  {
    int64_t five = 5, four = 4;
    float x5[5] = {1.f, 2.f, 3.f, 4.f, 5.f};
    OK(cldl_session_set_input(s, "x", CLDL_F32, &five, 1, x5, sizeof x5));
    FAILS(cldl_session_run(s), CLDL_ERROR_SHAPE, "pairs_reshape");
    CHECK(strstr(cldl_last_error(), "x: [5]") != NULL);
    OK(cldl_session_set_input(s, "x", CLDL_F32, &four, 1, x5, 4 * sizeof(float)));
    OK(cldl_session_run(s));
    CHECK(output_is(s, "y", 2, 2, 2, 4 * sizeof(float)));
    OK(cldl_session_get_output(s, "y", y, 4 * sizeof(float)));
    CHECK(close_all(y, x5, 4, 0.f));
  }
  close_model(model, s);
}

/* loop_data.onnx: trips = (int64)max(x); acc = x, then trips times acc = acc * 0.5 + x, stacked in accs. */
static void staged_loop(cldl_context ctx, cl_context clctx, cl_command_queue q, const char* dir) {
  cldl_model model;
  cldl_session s;
  static const int64_t sizes[] = {3, 1, 7, 5, 3};
  static const float peaks[] = {2.5f, 1.f, 4.75f, 1.9f, 3.2f}; /* max(x): 2, 1, 4, 1, 3 trips */
  int run, bound;
  float x[8], acc[8], accs[64], want_acc[8], want_accs[64];
  open_model(ctx, dir, "loop_data.onnx", &model, &s);
  for (bound = 0; bound < 2; ++bound)
    for (run = 0; run < (int)(sizeof sizes / sizeof sizes[0]); ++run) {
      int64_t n = sizes[run], trips = (int64_t)peaks[run], t;
      size_t i;
      cl_mem xb, accsb;
      for (i = 0; i < (size_t)n; ++i) x[i] = (float)((int)((i * 3 + (size_t)run) % 5) - 2) * 0.25f;
      x[(size_t)run % (size_t)n] = peaks[run];
      for (i = 0; i < (size_t)n; ++i) want_acc[i] = x[i];
      for (t = 0; t < trips; ++t)
        for (i = 0; i < (size_t)n; ++i) {
          want_acc[i] = want_acc[i] * 0.5f + x[i];
          want_accs[(size_t)t * (size_t)n + i] = want_acc[i];
        }
      set_x(s, clctx, q, bound, x, n, "accs", sizeof accs, &xb, &accsb);
      OK(cldl_session_run(s));
      CHECK(output_is(s, "acc", 1, n, 0, (size_t)n * sizeof(float)));
      CHECK(output_is(s, "accs", 2, trips, n, (size_t)(trips * n) * sizeof(float)));
      OK(cldl_session_get_output(s, "acc", acc, sizeof acc));
      CHECK(close_all(acc, want_acc, (size_t)n, 1e-6f));
      OK(cldl_session_get_output(s, "accs", accs, sizeof accs));
      CHECK(close_all(accs, want_accs, (size_t)(trips * n), 1e-6f));
      if (bound) {
        read_app_buffer(q, accsb, sizeof accs, accs);
        CHECK(close_all(accs, want_accs, (size_t)(trips * n), 1e-6f));
        OK(cldl_session_bind_input(s, "x", NULL, 0));
        OK(cldl_session_bind_output(s, "accs", NULL, 0));
        clReleaseMemObject(xb);
        clReleaseMemObject(accsb);
      }
    }
  close_model(model, s);
}

static void staged_models(cldl_context ctx, const char* dir) {
  cl_context clctx;
  cl_command_queue q;
  OK(cldl_context_cl(ctx, &clctx, &q));
  staged_nonzero(ctx, clctx, q, dir);
  staged_if(ctx, clctx, q, dir);
  staged_loop(ctx, clctx, q, dir);
}

int main(int argc, char** argv) {
  char path[4096];
  size_t n = 0, i, index = 0, size = 0;
  cldl_device_info dev;
  cldl_context ctx;
  cldl_model model, model1;
  cldl_session s, s1;
  cldl_tensor_info info;
  const char* names[1] = {"batch"};
  int64_t three[1] = {3}, one[1] = {1};
  cldl_load_options opts = batch_options(names, three), opts1 = batch_options(names, one);
  float x[3 * MLP_IN], y[3 * MLP_OUT], want[3 * MLP_OUT], xv[3 * MLP_IN];
  int64_t dims[2] = {3, MLP_IN};
  void* bytes;
  int calls = 0, spins;
  const char* spec;

  if (argc != 2) return 2;
  snprintf(path, sizeof path, "%s/mlp.onnx", argv[1]);

  CHECK(strlen(cldl_version()) >= 5);
  OK(cldl_device_count(&n));
  CHECK(n >= 1);
  for (i = 0; i < n; ++i) {
    dev.struct_size = sizeof dev;
    OK(cldl_device_get_info(i, &dev));
    CHECK(dev.name[0] != 0 && dev.device != NULL && dev.platform != NULL);
  }
  /* The suite's device: CLDL_DEVICE (ctest sets cpu, or accelerator on Intel's FPGA emulator). */
  spec = getenv("CLDL_DEVICE");
  if (!spec || !*spec) spec = "cpu";
  OK(cldl_device_select(spec, &index));
  dev.struct_size = sizeof dev;
  OK(cldl_device_get_info(index, &dev));
  if (strcmp(spec, "cpu") == 0) CHECK(dev.type == CLDL_DEVICE_CPU);
  if (strcmp(spec, "accelerator") == 0) CHECK(dev.type == CLDL_DEVICE_ACCELERATOR);

  OK(cldl_context_create(NULL, &ctx)); /* CLDL_DEVICE */
  OK(cldl_model_load(ctx, path, &opts, &model));
  OK(cldl_model_input_count(model, &n));
  CHECK(n == 1);
  OK(cldl_model_output_count(model, &n));
  CHECK(n == 2);
  info.struct_size = sizeof info;
  OK(cldl_model_input_info(model, 0, &info));
  CHECK(strcmp(info.name, "x") == 0 && info.dtype == CLDL_F32 && info.rank == 2);
  CHECK(info.dims[0] == 3 && info.dims[1] == MLP_IN && info.dynamic);
  CHECK(info.dim_symbols[0] && strcmp(info.dim_symbols[0], "batch") == 0 && info.dim_symbols[1] == NULL);
  CHECK(info.bytes == sizeof x);
  OK(cldl_model_output_info(model, 0, &info));
  CHECK(strcmp(info.name, "y") == 0 && info.dims[0] == 3 && info.dims[1] == MLP_OUT);

  /* A host run against the C reference (odd values, negative ones so the relu matters). */
  for (i = 0; i < 3 * MLP_IN; ++i) x[i] = (float)((int)(i * 7 % 13) - 6) * 0.3f;
  mlp_reference(x, 3, want);
  OK(cldl_session_create(model, &s));
  OK(cldl_session_set_input(s, "x", CLDL_F32, dims, 2, x, sizeof x));
  OK(cldl_session_run(s));
  OK(cldl_session_get_output(s, "y", y, sizeof y));
  CHECK(close_all(y, want, 3 * MLP_OUT, 1e-5f));
  OK(cldl_session_get_output(s, "x_view", xv, sizeof xv));
  CHECK(close_all(xv, x, 3 * MLP_IN, 0.f));

  /* Asynchronous runs: the callback fires once, with CLDL_OK; new inputs give new outputs. */
  for (i = 0; i < 3 * MLP_IN; ++i) x[i] = -x[i] + 0.1f;
  mlp_reference(x, 3, want);
  OK(cldl_session_set_input(s, "x", CLDL_F32, dims, 2, x, sizeof x));
  OK(cldl_session_run_async(s, on_done, &calls));
  OK(cldl_session_wait(s));
  for (spins = 0; g_callback_status < 0 && spins < 10000; ++spins) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  CHECK(calls == 1 && g_callback_status == CLDL_OK);
  OK(cldl_session_get_output(s, "y", y, sizeof y));
  CHECK(close_all(y, want, 3 * MLP_OUT, 1e-5f));
  {
    cl_event ev = NULL;
    cl_int st = 0;
    OK(cldl_session_enqueue(s, 0, NULL, &ev));
    CHECK(ev != NULL);
    CHECK(clWaitForEvents(1, &ev) == CL_SUCCESS);
    clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
    CHECK(st == CL_COMPLETE);
    clReleaseEvent(ev);
  }

  /* A model with two branches (two queues): enqueued runs back to back, each checked. */
  {
    cldl_model branch;
    cldl_session bs;
    float bx[4 * MLP_IN], bz[4 * MLP_OUT], bwant[4 * MLP_OUT];
    int64_t bdims[2] = {4, MLP_IN};
    int k;
    snprintf(path, sizeof path, "%s/branch.onnx", argv[1]);
    OK(cldl_model_load(ctx, path, NULL, &branch));
    OK(cldl_session_create(branch, &bs));
    for (k = 0; k < 3; ++k) {
      for (i = 0; i < 4 * MLP_IN; ++i) bx[i] = (float)((int)((i + (size_t)k) * 5 % 9) - 4) * (0.2f + 0.1f * (float)k);
      branch_reference(bx, 4, bwant);
      OK(cldl_session_set_input(bs, "x", CLDL_F32, bdims, 2, bx, sizeof bx));
      OK(cldl_session_enqueue(bs, 0, NULL, NULL));
      OK(cldl_session_enqueue(bs, 0, NULL, NULL)); /* the second run waits for the first */
      OK(cldl_session_get_output(bs, "z", bz, sizeof bz));
      CHECK(close_all(bz, bwant, 4 * MLP_OUT, 1e-5f));
    }
    OK(cldl_session_release(bs));
    OK(cldl_model_release(branch));
    snprintf(path, sizeof path, "%s/mlp.onnx", argv[1]);
  }

  /* Sessions of one model on four threads at once. */
  {
    pthread_t threads[4];
    thread_job jobs[4];
    int t;
    for (t = 0; t < 4; ++t) {
      jobs[t].model = model;
      jobs[t].seed = t;
      CHECK(pthread_create(&threads[t], NULL, run_thread, &jobs[t]) == 0);
    }
    for (t = 0; t < 4; ++t) {
      pthread_join(threads[t], NULL);
      CHECK(jobs[t].ok);
    }
  }

  /* From memory, batch 1. */
  bytes = read_file(path, &size);
  CHECK(bytes != NULL);
  OK(cldl_model_load_memory(ctx, bytes, size, &opts1, &model1));
  free(bytes);
  OK(cldl_session_create(model1, &s1));
  dims[0] = 1;
  OK(cldl_session_set_input(s1, "x", CLDL_F32, dims, 2, x, MLP_IN * sizeof(float)));
  OK(cldl_session_run(s1));
  OK(cldl_session_get_output(s1, "y", y, MLP_OUT * sizeof(float)));
  mlp_reference(x, 1, want);
  CHECK(close_all(y, want, MLP_OUT, 1e-5f));

  /* Any batch on the session of a model loaded for batch 1: a new signature is planned at the run. */
  {
    float x4[4 * MLP_IN], y4[4 * MLP_OUT], want4[4 * MLP_OUT];
    for (i = 0; i < 4 * MLP_IN; ++i) x4[i] = (float)((int)(i * 5 % 17) - 8) * 0.2f;
    mlp_reference(x4, 4, want4);
    dims[0] = 4;
    OK(cldl_session_set_input(s1, "x", CLDL_F32, dims, 2, x4, sizeof x4));
    OK(cldl_session_run(s1));
    info.struct_size = sizeof info;
    OK(cldl_session_output_info(s1, "y", &info));
    CHECK(info.rank == 2 && info.dims[0] == 4 && info.dims[1] == MLP_OUT && info.bytes == sizeof y4);
    FAILS(cldl_session_get_output(s1, "y", y4, MLP_OUT * sizeof(float)), CLDL_ERROR_SHAPE, "output 'y' is 112 bytes");
    OK(cldl_session_get_output(s1, "y", y4, sizeof y4));
    CHECK(close_all(y4, want4, 4 * MLP_OUT, 1e-5f));
    dims[0] = 1; /* back to batch 1: its plan is still cached */
    OK(cldl_session_set_input(s1, "x", CLDL_F32, dims, 2, x, MLP_IN * sizeof(float)));
    OK(cldl_session_run(s1));
    OK(cldl_session_get_output(s1, "y", y, MLP_OUT * sizeof(float)));
    CHECK(close_all(y, want, MLP_OUT, 1e-5f));
  }

  /* Error paths: codes and messages. */
  FAILS(cldl_session_set_input(s1, "x", CLDL_F32, dims, 2, x, 3 * MLP_IN * sizeof(float)), CLDL_ERROR_SHAPE, "bytes");
  dims[1] = MLP_IN + 1;
  FAILS(cldl_session_set_input(s1, "x", CLDL_F32, dims, 2, x, (MLP_IN + 1) * sizeof(float)), CLDL_ERROR_SHAPE,
        "expected shape [batch, 5], got [1, 6] (dimension 1 is fixed)");
  dims[1] = MLP_IN;
  FAILS(cldl_session_set_input(s1, "x", CLDL_F32, dims, 1, x, MLP_IN * sizeof(float)), CLDL_ERROR_SHAPE,
        "expected rank 2");
  FAILS(cldl_session_set_input(s1, "x", CLDL_I32, dims, 2, x, MLP_IN * 4), CLDL_ERROR_DTYPE, "expected f32, got i32");
  FAILS(cldl_session_set_input(s1, "nope", CLDL_F32, dims, 2, x, MLP_IN * 4), CLDL_ERROR_NOT_FOUND,
        "'nope' is not an input of the model (it has: x)");
  FAILS(cldl_session_get_output(s1, "x", y, sizeof y), CLDL_ERROR_NOT_FOUND, "'x' is not an output");
  FAILS(cldl_session_get_output(s1, "y", y, 4), CLDL_ERROR_SHAPE, "output 'y' is 28 bytes");
  FAILS(cldl_session_run(NULL), CLDL_ERROR_INVALID_HANDLE, "null session handle");
  FAILS(cldl_session_run((cldl_session)(uintptr_t)0x7777), CLDL_ERROR_INVALID_HANDLE, "not live");
  {
    cldl_session never = (cldl_session)1;
    FAILS(cldl_session_create((cldl_model)s1, &never), CLDL_ERROR_INVALID_HANDLE, "model handle"); /* wrong kind */
    CHECK(never == NULL); /* out-handles are NULL after a failure */
  }
  OK(cldl_session_release(s1));
  FAILS(cldl_session_run(s1), CLDL_ERROR_INVALID_HANDLE, "not live"); /* stale */
  FAILS(cldl_session_release(s1), CLDL_ERROR_INVALID_HANDLE, "not live");
  OK(cldl_model_release(model1));
  FAILS(cldl_model_load(ctx, "/nonexistent/m.onnx", NULL, &model1), CLDL_ERROR_MODEL, "/nonexistent/m.onnx");
  /* Without load options the symbolic dim stays symbolic: -1 in the info, any batch at the run. */
  OK(cldl_model_load(ctx, path, NULL, &model1));
  info.struct_size = sizeof info;
  OK(cldl_model_input_info(model1, 0, &info));
  CHECK(info.dims[0] == -1 && info.dims[1] == MLP_IN && info.bytes == 0 && info.dynamic);
  OK(cldl_session_create(model1, &s1));
  FAILS(cldl_session_run(s1), CLDL_ERROR_SHAPE, "input 'x' (f32 [batch, 5]) is missing");
  FAILS(cldl_session_output_info(s1, "y", &info), CLDL_ERROR_INVALID_ARGUMENT, "has not run yet");
  dims[0] = 2;
  OK(cldl_session_set_input(s1, "x", CLDL_F32, dims, 2, x, 2 * MLP_IN * sizeof(float)));
  OK(cldl_session_run(s1));
  OK(cldl_session_get_output(s1, "y", y, 2 * MLP_OUT * sizeof(float)));
  mlp_reference(x, 2, want);
  CHECK(close_all(y, want, 2 * MLP_OUT, 1e-5f));
  OK(cldl_session_release(s1));
  OK(cldl_model_release(model1));
  FAILS(cldl_model_load_memory(ctx, "not onnx", 8, &opts, &model1), CLDL_ERROR_MODEL, "model in memory");
  opts.struct_size = 4;
  FAILS(cldl_model_load(ctx, path, &opts, &model1), CLDL_ERROR_INVALID_ARGUMENT, "struct_size");
  info.struct_size = 0;
  FAILS(cldl_model_input_info(model, 0, &info), CLDL_ERROR_INVALID_ARGUMENT, "struct_size");
  info.struct_size = sizeof info;
  FAILS(cldl_model_input_info(model, 5, &info), CLDL_ERROR_NOT_FOUND, "out of range");
  FAILS(cldl_device_select("no-such-device-xyz", &index), CLDL_ERROR_NOT_FOUND, "no-such-device-xyz");
  FAILS(cldl_context_create(NULL, NULL), CLDL_ERROR_INVALID_ARGUMENT, "out is NULL");
  OK(cldl_session_bind_input(s, "x", NULL, 0)); /* NULL unbinds */
  /* A failing call on this thread does not disturb a later successful call's result. */
  dims[0] = 3;
  OK(cldl_session_set_input(s, "x", CLDL_F32, dims, 2, x, sizeof x));
  OK(cldl_session_run(s));
  OK(cldl_session_get_output(s, "y", y, sizeof y));
  mlp_reference(x, 3, want);
  CHECK(close_all(y, want, 3 * MLP_OUT, 1e-5f));

  OK(cldl_session_release(s));
  OK(cldl_model_release(model));
  FAILS(cldl_model_release(model), CLDL_ERROR_INVALID_HANDLE, "not live");
  staged_models(ctx, argv[1]);
  OK(cldl_context_release(ctx));
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("capi ok\n");
  return 0;
}
