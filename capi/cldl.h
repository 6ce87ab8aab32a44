/* cldl's stable C API (plain C99). Opaque handles; every call returns a cldl_status and, on failure,
 * leaves a message for cldl_last_error() (thread-local). No C++ exception, abort or exit crosses this
 * boundary; a null, released or wrong-kind handle is CLDL_ERROR_INVALID_HANDLE.
 *
 * Interop: cldl_context_wrap() adopts an app's cl_context + in-order cl_command_queue. cldl then
 * enqueues every command of a model run on that queue, takes the app's events as wait lists and returns
 * its own, and can read inputs from / write outputs to the app's cl_mem in place. */
#ifndef CLDL_H
#define CLDL_H

#include <stddef.h>
#include <stdint.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CLDL_API __attribute__((visibility("default")))
#else
#define CLDL_API
#endif

typedef enum cldl_status {
  CLDL_OK = 0,
  CLDL_ERROR_INVALID_ARGUMENT = 1, /* null pointer, bad value or option */
  CLDL_ERROR_INVALID_HANDLE = 2,   /* null, released or wrong-kind handle */
  CLDL_ERROR_NOT_FOUND = 3,        /* unknown input / output name, no matching device */
  CLDL_ERROR_SHAPE = 4,            /* shape (or byte count) differs from the model's */
  CLDL_ERROR_DTYPE = 5,            /* data type differs from the model's */
  CLDL_ERROR_OPENCL = 6,           /* an OpenCL call failed */
  CLDL_ERROR_MODEL = 7,            /* the model cannot be read, prepared or compiled */
  CLDL_ERROR_INTERNAL = 8          /* anything else */
} cldl_status;

typedef enum cldl_dtype {
  CLDL_F32 = 0,
  CLDL_F16 = 1,
  CLDL_I32 = 2,
  CLDL_I64 = 3,
  CLDL_U8 = 4,
  CLDL_BOOL = 5
} cldl_dtype;

typedef enum cldl_device_type {
  CLDL_DEVICE_GPU = 0,
  CLDL_DEVICE_CPU = 1,
  CLDL_DEVICE_ACCELERATOR = 2,
  CLDL_DEVICE_OTHER = 3
} cldl_device_type;

typedef struct cldl_context_t* cldl_context;
typedef struct cldl_model_t* cldl_model;
typedef struct cldl_session_t* cldl_session;

/* Library version "MAJOR.MINOR.PATCH"; static storage. */
CLDL_API const char* cldl_version(void);
/* Message of the last failed call on this thread ("" when none); valid until the next failing call. */
CLDL_API const char* cldl_last_error(void);
/* Name of a status code, e.g. "CLDL_ERROR_SHAPE". */
CLDL_API const char* cldl_status_name(cldl_status s);
/* Size in bytes of one element; 0 for an unknown dtype. */
CLDL_API size_t cldl_dtype_size(cldl_dtype t);

/* ---- Devices ---------------------------------------------------------------------------------- */

typedef struct cldl_device_info {
  size_t struct_size; /* set to sizeof(cldl_device_info) before the call */
  char id[16];        /* "P:D": platform and device index */
  char name[256];
  char vendor[256];
  char platform_name[256];
  char driver_version[128];
  char opencl_c_version[128];
  cldl_device_type type;
  uint32_t compute_units;
  uint64_t global_mem_bytes;
  uint64_t local_mem_bytes;
  uint64_t max_alloc_bytes;
  int fp16, fp64;
  cl_platform_id platform;
  cl_device_id device;
} cldl_device_info;

/* Every OpenCL device of every platform, in platform then device order. */
CLDL_API cldl_status cldl_device_count(size_t* count);
CLDL_API cldl_status cldl_device_get_info(size_t index, cldl_device_info* info);
/* Index of the device a spec picks, as the CLI's --device: NULL or "" (CLDL_DEVICE, then
 * GPU > accelerator > CPU), "gpu", "cpu", "gpu:1", "P:D", or a substring of the device name. */
CLDL_API cldl_status cldl_device_select(const char* spec, size_t* index);

/* ---- Contexts --------------------------------------------------------------------------------- */

/* A context on the device `spec` picks (see cldl_device_select); cldl owns its queues. */
CLDL_API cldl_status cldl_context_create(const char* spec, cldl_context* out);
/* Adopts the app's context and in-order queue (both retained): every model run of this context is
 * enqueued on `queue`. */
CLDL_API cldl_status cldl_context_wrap(cl_context context, cl_command_queue queue, cldl_context* out);
CLDL_API cldl_status cldl_context_release(cldl_context ctx);
CLDL_API cldl_status cldl_context_device_info(cldl_context ctx, cldl_device_info* info);
/* The context's cl_context and its first queue (not retained for the caller). */
CLDL_API cldl_status cldl_context_cl(cldl_context ctx, cl_context* context, cl_command_queue* queue);

/* ---- Models ----------------------------------------------------------------------------------- */

typedef struct cldl_load_options {
  size_t struct_size; /* sizeof(cldl_load_options); cldl_load_options_init sets it */
  /* Values for symbolic input dimensions ("batch" -> 8): dim_count names and values. Optional: a model
   * takes any input shape its graph allows; these plan that signature at load (a warm-up). */
  size_t dim_count;
  const char* const* dim_names;
  const int64_t* dim_values;
  /* Most in-order queues independent branches spread over (0: default, one on a CPU device and two on
   * others; a wrapped context: 1, so the whole run is on the app's queue). */
  int queues;
  /* RNN/LSTM/GRU strategy: NULL or "auto", "sequential", "time", "layer", "data", "wave". */
  const char* rnn_strategy;
} cldl_load_options;

CLDL_API void cldl_load_options_init(cldl_load_options* opts);

/* ONNX model from a file or from memory (external data files of an in-memory model resolve against the
 * current directory); `opts` may be NULL. */
CLDL_API cldl_status cldl_model_load(cldl_context ctx, const char* path, const cldl_load_options* opts,
                                     cldl_model* out);
CLDL_API cldl_status cldl_model_load_memory(cldl_context ctx, const void* data, size_t size,
                                            const cldl_load_options* opts, cldl_model* out);
CLDL_API cldl_status cldl_model_release(cldl_model model);

typedef struct cldl_tensor_info {
  size_t struct_size; /* set to sizeof(cldl_tensor_info) before the call */
  const char* name;   /* pointers below live as long as the model */
  cldl_dtype dtype;
  size_t rank;
  const int64_t* dims;            /* model info: as declared, -1 where symbolic unless the load options
                                     fixed it; session output info: the last run's */
  const char* const* dim_symbols; /* per dim: NULL when fixed in the model file, else its symbol */
  int dynamic;                    /* non-zero when any dimension is symbolic in the model file */
  size_t bytes;                   /* numel * dtype size; 0 while a dim is -1 */
} cldl_tensor_info;

CLDL_API cldl_status cldl_model_input_count(cldl_model model, size_t* count);
CLDL_API cldl_status cldl_model_output_count(cldl_model model, size_t* count);
CLDL_API cldl_status cldl_model_input_info(cldl_model model, size_t index, cldl_tensor_info* info);
CLDL_API cldl_status cldl_model_output_info(cldl_model model, size_t index, cldl_tensor_info* info);

/* ---- Sessions: device memory for one run at a time; sessions of one model may run concurrently -- */

CLDL_API cldl_status cldl_session_create(cldl_model model, cldl_session* out);
CLDL_API cldl_status cldl_session_release(cldl_session s);

/* Copies host data for the input; the caller may reuse its memory at once. dtype must match the model's
 * input; dims any shape the model allows (rank and fixed dims as declared, symbolic dims any size, one
 * value per symbol across inputs); bytes = numel * dtype size. The next run is planned for the shapes of
 * all inputs (a new signature is planned once, then reused; see docs). */
CLDL_API cldl_status cldl_session_set_input(cldl_session s, const char* name, cldl_dtype dtype, const int64_t* dims,
                                            size_t rank, const void* data, size_t bytes);
/* The shape of an input bound to an app buffer (cldl_session_bind_input) for the next runs; inputs whose
 * shape the model fixes need none. */
CLDL_API cldl_status cldl_session_set_input_shape(cldl_session s, const char* name, const int64_t* dims, size_t rank);
/* The model reads input `name` in place from the app's buffer at `offset` bytes (a multiple of the
 * element size), and writes output `name` in place into it (a device copy at the end of the run when
 * the output is not produced by a kernel of its own, e.g. an input or a constant). The buffer must
 * belong to the session's cl_context and stay alive while bound; bind NULL to unbind. Each run checks
 * that the run's shape fits the buffer (CLDL_ERROR_SHAPE naming both sizes). */
CLDL_API cldl_status cldl_session_bind_input(cldl_session s, const char* name, cl_mem buffer, size_t offset);
CLDL_API cldl_status cldl_session_bind_output(cldl_session s, const char* name, cl_mem buffer, size_t offset);

/* Runs the model and waits for it. A model whose plan decides at run time (NonZero, NonMaxSuppression,
 * an If or a Loop on computed data: a staged plan) runs here too: only the deciding values come back to
 * the host, outputs have the shapes the data decided (cldl_session_output_info), and bound outputs get a
 * device copy once their size is known (a buffer too small is CLDL_ERROR_SHAPE naming both sizes; the
 * outputs stay readable). */
CLDL_API cldl_status cldl_session_run(cldl_session s);
/* Enqueues a run whose first commands wait for `wait_list`; `*event` (may be NULL) receives an event,
 * retained for the caller, that completes when every output is written. Returns without waiting, so a
 * staged plan (see cldl_session_run) is refused with CLDL_ERROR_MODEL, as by cldl_session_run_async. */
CLDL_API cldl_status cldl_session_enqueue(cldl_session s, cl_uint num_events, const cl_event* wait_list,
                                          cl_event* event);
/* Enqueues a run and calls `callback(session, status, user_data)` from a driver thread when it
 * completes (status CLDL_OK, or CLDL_ERROR_OPENCL when a command failed). As for any OpenCL event
 * callback, the callback must return quickly and must not block on OpenCL (no cldl_session_run or
 * cldl_session_get_output in it): signal another thread instead. */
typedef void (*cldl_callback)(cldl_session s, cldl_status status, void* user_data);
CLDL_API cldl_status cldl_session_run_async(cldl_session s, cldl_callback callback, void* user_data);
/* Waits for the session's last run. */
CLDL_API cldl_status cldl_session_wait(cldl_session s);

/* Output `name` of the last run: its dtype and shape (pointers valid until the session's next run). */
CLDL_API cldl_status cldl_session_output_info(cldl_session s, const char* name, cldl_tensor_info* info);
/* Copies output `name` of the last run to host memory (waits for the run); `bytes` must be at least
 * the output's size. */
CLDL_API cldl_status cldl_session_get_output(cldl_session s, const char* name, void* data, size_t bytes);
/* Enqueues a device copy of output `name` into the app's buffer after the last run and `wait_list`;
 * `*event` (may be NULL) receives the copy's event, retained for the caller. */
CLDL_API cldl_status cldl_session_copy_output(cldl_session s, const char* name, cl_mem buffer, size_t offset,
                                              cl_uint num_events, const cl_event* wait_list, cl_event* event);

#ifdef __cplusplus
}
#endif

#endif /* CLDL_H */
