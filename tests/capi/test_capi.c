/* The C API from C: devices, loading (file and memory, symbolic dims), tensor info, host runs checked
 * against a C reference, asynchronous runs, and the error paths (codes and messages).
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
  OK(cldl_context_release(ctx));
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("capi ok\n");
  return 0;
}
