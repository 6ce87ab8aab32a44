// The C API (capi/cldl.h) over the C++ API. Handles are ids in a registry, never raw pointers, so a
// released or made-up handle is an error code, not a crash; every entry point catches everything.
#include "capi/cldl.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "models/model.hpp"
#include "models/onnx_import.hpp"
#include "runtime/cldl.hpp"

#ifndef CLDL_VERSION
#define CLDL_VERSION "dev"
#endif

namespace {

using namespace cldl;

thread_local std::string t_last_error;

// A failure the C layer itself detects, with the status it maps to.
struct CapiError {
  cldl_status status;
  std::string message;
};

template <typename... Args>
[[noreturn]] void capi_fail(cldl_status s, fmt::format_string<Args...> f, Args&&... args) {
  throw CapiError{s, fmt::format(f, std::forward<Args>(args)...)};
}

struct IoInfo {
  std::string name;
  cldl_dtype dtype = CLDL_F32;
  std::vector<int64_t> dims;
  std::vector<std::string> symbols;
  std::vector<const char*> symbol_ptrs;  // into `symbols`, NULL where the dim is fixed
  bool dynamic = false;
  size_t bytes = 0;
};

struct ContextObj {
  std::shared_ptr<Context> ctx;
  bool wrapped = false;
};
struct ModelObj {
  std::shared_ptr<graph::Model> model;
  std::vector<IoInfo> inputs, outputs;  // as declared (dims -1 where symbolic, unless fixed at load)
};
// A session stages what the app gives (host inputs, input shapes, bound buffers); each run finds the plan
// of the inputs' signature and applies them to that plan's Session.
struct SessionObj {
  std::shared_ptr<ModelObj> model;
  std::unique_ptr<graph::ModelSession> session;
  std::map<std::string, HostTensor> staged;  // set_input
  std::map<std::string, Shape> shapes;       // every input's shape for the next run
  std::map<std::string, std::pair<cl::Buffer, size_t>> bound_in, bound_out;  // app buffers, offsets
  // Per plan Session (by serial): staged inputs already written there (until set_input stages a new
  // value), and inputs bound to an app buffer there.
  struct InnerState {
    std::set<std::string> written, app_bound;
  };
  std::map<uint64_t, InnerState> inner;
  graph::Session* last = nullptr;  // the last run's (a plan without run-time decisions)
  // The last run of a staged plan (run-time decisions, ModelSession::run_on_device): its outputs on the
  // device, in their real shapes, until the next run.
  std::map<std::string, Tensor> staged_out;
  bool ran_staged = false;
  std::vector<IoInfo> last_outputs;  // output shapes of the last run
  std::mutex m;  // one call at a time per session
};

// Handles are ids (never reused) that map to live objects.
struct Registry {
  std::mutex m;
  uintptr_t next = 1;
  std::map<uintptr_t, std::shared_ptr<ContextObj>> contexts;
  std::map<uintptr_t, std::shared_ptr<ModelObj>> models;
  std::map<uintptr_t, std::shared_ptr<SessionObj>> sessions;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: callbacks may run during exit
  return *r;
}

template <typename T>
std::shared_ptr<T> lookup(std::map<uintptr_t, std::shared_ptr<T>>& map, const void* h, const char* kind) {
  if (!h) capi_fail(CLDL_ERROR_INVALID_HANDLE, "null {} handle", kind);
  std::lock_guard lock(registry().m);
  auto it = map.find(reinterpret_cast<uintptr_t>(h));
  if (it == map.end())
    capi_fail(CLDL_ERROR_INVALID_HANDLE, "{} handle {} is not live (released or never created)", kind, h);
  return it->second;
}
template <typename T>
uintptr_t add(std::map<uintptr_t, std::shared_ptr<T>>& map, std::shared_ptr<T> obj) {
  std::lock_guard lock(registry().m);
  uintptr_t id = registry().next++;
  map[id] = std::move(obj);
  return id;
}
template <typename T>
cldl_status drop(std::map<uintptr_t, std::shared_ptr<T>>& map, const void* h, const char* kind) {
  std::shared_ptr<T> keep;  // destroyed outside the lock
  {
    std::lock_guard lock(registry().m);
    auto it = map.find(reinterpret_cast<uintptr_t>(h));
    if (!h || it == map.end()) capi_fail(CLDL_ERROR_INVALID_HANDLE, "{} handle {} is not live", kind, h);
    keep = std::move(it->second);
    map.erase(it);
  }
  return CLDL_OK;
}

std::shared_ptr<ContextObj> get(cldl_context h) { return lookup(registry().contexts, h, "context"); }
std::shared_ptr<ModelObj> get(cldl_model h) { return lookup(registry().models, h, "model"); }
std::shared_ptr<SessionObj> get(cldl_session h) { return lookup(registry().sessions, h, "session"); }

// Runs `f`, turning every exception into a status and a thread-local message.
template <typename F>
cldl_status guarded(const char* fn, cldl_status cldl_error_status, F&& f) noexcept {
  try {
    f();
    return CLDL_OK;
  } catch (const CapiError& e) {
    t_last_error = fmt::format("{}: {}", fn, e.message);
    return e.status;
  } catch (const Error& e) {
    t_last_error = fmt::format("{}: {}", fn, e.what());
    return e.cl_code() != 0 ? CLDL_ERROR_OPENCL : cldl_error_status;
  } catch (const std::bad_alloc&) {
    t_last_error = fmt::format("{}: out of host memory", fn);
    return CLDL_ERROR_INTERNAL;
  } catch (const std::exception& e) {
    t_last_error = fmt::format("{}: {}", fn, e.what());
    return CLDL_ERROR_INTERNAL;
  } catch (...) {
    t_last_error = fmt::format("{}: unknown error", fn);
    return CLDL_ERROR_INTERNAL;
  }
}

void need(const void* p, const char* what) {
  if (!p) capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "{} is NULL", what);
}

void need_size(size_t struct_size, size_t min_size, const char* what) {
  if (struct_size < min_size)
    capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "{}.struct_size is {}; set it to sizeof({}) ({})", what, struct_size, what,
              min_size);
}

DType to_dtype(cldl_dtype t) {
  if (int(t) < 0 || int(t) > int(CLDL_BOOL)) capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "unknown cldl_dtype {}", int(t));
  return DType(int(t));
}

void copy_str(char* dst, size_t n, const std::string& s) {
  size_t k = std::min(n - 1, s.size());
  std::memcpy(dst, s.data(), k);
  dst[k] = 0;
}

void fill_device_info(const Device& d, cldl_device_info* info) {
  size_t want = info->struct_size;
  need_size(want, offsetof(cldl_device_info, device) + sizeof(cl_device_id), "cldl_device_info");
  std::memset(reinterpret_cast<char*>(info) + sizeof(size_t), 0, sizeof(cldl_device_info) - sizeof(size_t));
  copy_str(info->id, sizeof info->id, d.id());
  copy_str(info->name, sizeof info->name, d.info.name);
  copy_str(info->vendor, sizeof info->vendor, d.info.vendor);
  copy_str(info->platform_name, sizeof info->platform_name, d.info.platform_name);
  copy_str(info->driver_version, sizeof info->driver_version, d.info.driver_version);
  copy_str(info->opencl_c_version, sizeof info->opencl_c_version, d.info.opencl_c_version);
  info->type = d.info.type == DeviceType::gpu           ? CLDL_DEVICE_GPU
               : d.info.type == DeviceType::cpu         ? CLDL_DEVICE_CPU
               : d.info.type == DeviceType::accelerator ? CLDL_DEVICE_ACCELERATOR
                                                        : CLDL_DEVICE_OTHER;
  info->compute_units = d.info.compute_units;
  info->global_mem_bytes = d.info.global_mem_bytes;
  info->local_mem_bytes = d.info.local_mem_bytes;
  info->max_alloc_bytes = d.info.max_alloc_bytes;
  info->fp16 = d.info.fp16;
  info->fp64 = d.info.fp64;
  info->platform = d.platform();
  info->device = d.device();
}

// `v` as reported to the app: dims from `shape` (a plan's, or the declared one with -1 where symbolic),
// symbols from the declaration; bytes 0 while a dim is unknown.
IoInfo io_info(const graph::ValueInfo& v, const graph::ValueShape& shape, const graph::ValueInfo* declared) {
  IoInfo r;
  r.name = v.name;
  r.dtype = cldl_dtype(int(v.dtype));
  r.dims = shape.known ? shape.dims : std::vector<int64_t>{};
  bool complete = shape.known;
  for (auto d : r.dims) complete = complete && d >= 0;
  r.bytes = complete ? size_t(Shape(r.dims).numel()) * dtype_size(v.dtype) : 0;
  r.symbols.resize(r.dims.size());
  if (declared && declared->shape.known && declared->shape.dims.size() == r.dims.size())
    for (size_t i = 0; i < r.dims.size(); ++i)
      if (declared->shape.dims[i] < 0) {
        std::string sym = i < declared->shape.symbols.size() ? declared->shape.symbols[i] : std::string();
        r.symbols[i] = sym.empty() ? "?" : sym;
        r.dynamic = true;
      }
  for (auto& sym : r.symbols) r.symbol_ptrs.push_back(sym.empty() ? nullptr : sym.c_str());
  return r;
}

cldl_model load_graph(cldl_context ctx, graph::Graph g, const cldl_load_options* opts) {
  auto c = get(ctx);
  graph::LoadOptions lo;
  int queues = 0;
  if (opts) {
    need_size(opts->struct_size, offsetof(cldl_load_options, rnn_strategy) + sizeof(const char*), "cldl_load_options");
    if (opts->dim_count && (!opts->dim_names || !opts->dim_values))
      capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "cldl_load_options: dim_count is {} but dim_names or dim_values is NULL",
                opts->dim_count);
    for (size_t i = 0; i < opts->dim_count; ++i) {
      if (!opts->dim_names[i]) capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "cldl_load_options: dim_names[{}] is NULL", i);
      if (opts->dim_values[i] < 0)
        capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "cldl_load_options: dimension '{}' = {} is negative", opts->dim_names[i],
                  opts->dim_values[i]);
      lo.prepare.dims[opts->dim_names[i]] = opts->dim_values[i];
    }
    if (opts->queues < 0) capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "cldl_load_options: queues is {}", opts->queues);
    queues = opts->queues;
    if (opts->rnn_strategy) lo.compile.rnn_strategy = opts->rnn_strategy;
  }
  lo.compile.queues = queues > 0 ? queues : c->wrapped ? 1 : lo.compile.queues;
  std::vector<graph::ValueInfo> declared_in = g.inputs, declared_out = g.outputs;
  for (auto* list : {&declared_in, &declared_out})
    for (auto& v : *list)
      if (v.composite())
        capi_fail(CLDL_ERROR_MODEL,
                  "{} '{}' is a sequence or optional value: the C API takes and returns tensors (C++: "
                  "ModelSession::run_values; Python: cldl.InferenceSession)",
                  list == &declared_in ? "input" : "output", v.name);
  auto m = std::make_shared<ModelObj>();
  m->model = graph::Model::create(c->ctx, std::move(g), lo);
  auto find = [](const std::vector<graph::ValueInfo>& v, const std::string& n) -> const graph::ValueInfo* {
    for (auto& x : v)
      if (x.name == n) return &x;
    return nullptr;
  };
  // Dims fixed at load (the pre-planned signature) are reported; the rest stay -1 until a run.
  auto pre = m->model->preplanned();
  auto planned = [&](const std::string& name) -> const graph::ValueInfo* {
    if (!pre) return nullptr;
    auto* v = find(pre->graph().inputs, name);
    return v ? v : find(pre->graph().outputs, name);
  };
  for (auto& in : m->model->graph().inputs) {
    auto* p = planned(in.name);
    m->inputs.push_back(io_info(in, p ? p->shape : in.shape, find(declared_in, in.name)));
  }
  for (auto& out : m->model->graph().outputs) {
    auto* p = planned(out.name);
    m->outputs.push_back(io_info(out, p ? p->shape : out.shape, find(declared_out, out.name)));
  }
  return reinterpret_cast<cldl_model>(add(registry().models, std::move(m)));
}

const IoInfo& find_io(const ModelObj& m, const char* name, bool input) {
  need(name, "name");
  for (auto& io : input ? m.inputs : m.outputs)
    if (io.name == name) return io;
  std::string names;
  for (auto& io : input ? m.inputs : m.outputs) names += (names.empty() ? "" : ", ") + io.name;
  capi_fail(CLDL_ERROR_NOT_FOUND, "'{}' is not an {} of the model (it has: {})", name, input ? "input" : "output",
            names);
}

void fill_tensor_info(const IoInfo& io, cldl_tensor_info* info) {
  need(info, "info");
  need_size(info->struct_size, offsetof(cldl_tensor_info, bytes) + sizeof(size_t), "cldl_tensor_info");
  info->name = io.name.c_str();
  info->dtype = io.dtype;
  info->rank = io.dims.size();
  info->dims = io.dims.data();
  info->dim_symbols = io.symbol_ptrs.data();
  info->dynamic = io.dynamic;
  info->bytes = io.bytes;
}

// The app's buffer checked against the model's context and the element size (shape-independent checks).
void check_app_buffer(const ModelObj& m, const IoInfo& io, cl_mem buffer, size_t offset) {
  cl_context mem_ctx = nullptr;
  cl_int err = clGetMemObjectInfo(buffer, CL_MEM_CONTEXT, sizeof mem_ctx, &mem_ctx, nullptr);
  if (err != CL_SUCCESS)
    capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "'{}': cl_mem {} is not a valid buffer ({})", io.name,
              static_cast<void*>(buffer), cl_error_name(err));
  if (mem_ctx != m.model->context().cl()())
    capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "'{}': the buffer belongs to another cl_context than the model's", io.name);
  if (offset % cldl_dtype_size(io.dtype) != 0)
    capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "'{}': offset {} is not a multiple of the element size {}", io.name, offset,
              cldl_dtype_size(io.dtype));
}

// The app's buffer as a device tensor of `shape` (a run's), which must fit it.
Tensor app_tensor(const ModelObj& m, const std::string& name, DType dtype, const Shape& shape, const cl::Buffer& buffer,
                  size_t offset) {
  size_t size = 0;
  check(buffer.getInfo(CL_MEM_SIZE, &size), "clGetMemObjectInfo", name);
  size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  if (offset + bytes > size)
    capi_fail(CLDL_ERROR_SHAPE, "'{}': the run's {} {} is {} bytes; at offset {} the app's buffer of {} bytes holds {}",
              name, to_string(dtype), shape.str(), bytes, offset, size, size > offset ? size - offset : 0);
  Tensor t;
  t.buffer = buffer;
  t.offset_bytes = offset;
  t.shape = shape;
  t.dtype = dtype;
  t.device = m.model->options().compile.device;
  return t;
}

// A shape against the model's input: rank and fixed dims (symbols are checked across inputs at the run).
void check_input_shape(const IoInfo& io, const graph::ValueInfo& declared, const Shape& got) {
  if (!declared.shape.known) return;
  if (got.rank() != declared.shape.dims.size())
    capi_fail(CLDL_ERROR_SHAPE, "input '{}': expected rank {} ({}), got shape {}", io.name, declared.shape.dims.size(),
              declared.shape.str(), got.str());
  for (size_t i = 0; i < got.rank(); ++i)
    if (declared.shape.dims[i] >= 0 && declared.shape.dims[i] != got.dims[i])
      capi_fail(CLDL_ERROR_SHAPE, "input '{}': expected shape {}, got {} (dimension {} is fixed)", io.name,
                declared.shape.str(), got.str(), i);
}

const graph::ValueInfo& declared_input(const ModelObj& m, const std::string& name) {
  for (auto& in : m.model->graph().inputs)
    if (in.name == name) return in;
  capi_fail(CLDL_ERROR_NOT_FOUND, "'{}' is not an input of the model", name);
}

cl::CommandQueue run_queue(const ModelObj& m) {
  auto& o = m.model->options().compile;
  return m.model->context().queue(o.device, 0, o.profiling);
}

// The plan Session of the signature of the inputs set (planned on first sight), under the session's lock.
graph::Session& plan_run(SessionObj& s) {
  graph::Model& model = *s.model->model;
  std::map<std::string, HostTensor> values;
  for (auto& name : model.shape_inputs()) {
    auto it = s.staged.find(name);
    if (it == s.staged.end() || s.bound_in.count(name))
      capi_fail(CLDL_ERROR_SHAPE, "input '{}' decides shapes by its value: set it with cldl_session_set_input", name);
    values[name] = it->second;
  }
  graph::Signature sig;
  try {
    sig = model.signature(s.shapes, values);
  } catch (const Error& e) {
    capi_fail(CLDL_ERROR_SHAPE, "{}", e.what());
  }
  graph::Session* inner = nullptr;
  try {
    inner = &s.session->session_for(sig);
  } catch (const Error& e) {
    if (e.cl_code() != 0) throw;
    capi_fail(CLDL_ERROR_SHAPE, "{}", e.what());
  }
  return *inner;
}

// A plan without run-time decisions: the app's bindings and the host inputs set applied to its Session
// (inputs written once per value), ready to enqueue.
void bind_run(SessionObj& s, graph::Session& session) {
  graph::Model& model = *s.model->model;
  graph::Session* inner = &session;
  const graph::Graph& pg = inner->model().graph();
  // State of sessions the model session dropped goes with them (serials are never reused).
  std::set<uint64_t> live;
  for (auto* x : s.session->sessions()) live.insert(x->serial());
  std::erase_if(s.inner, [&](auto& kv) { return !live.count(kv.first); });
  auto& st = s.inner[inner->serial()];
  for (auto& in : pg.inputs) {
    Shape shape = in.shape.to_shape();
    if (auto b = s.bound_in.find(in.name); b != s.bound_in.end()) {
      inner->bind_input(in.name, app_tensor(*s.model, in.name, in.dtype, shape, b->second.first, b->second.second));
      st.app_bound.insert(in.name);
      st.written.erase(in.name);
      continue;
    }
    auto h = s.staged.find(in.name);
    if (h == s.staged.end())
      capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "input '{}' has a shape but no data: set it or bind a buffer", in.name);
    if (st.app_bound.erase(in.name)) inner->bind_input(in.name, Tensor{});  // back to cldl's own buffer
    if (st.written.count(in.name)) continue;
    inner->write_input(in.name, h->second);
    st.written.insert(in.name);
  }
  for (auto& out : pg.outputs) {
    auto b = s.bound_out.find(out.name);
    Tensor t = b == s.bound_out.end() ? Tensor{}
                                      : app_tensor(*s.model, out.name, out.dtype, out.shape.to_shape(), b->second.first,
                                                   b->second.second);
    inner->bind_output(out.name, t);
  }
  s.last = inner;
  if (s.ran_staged) {
    s.ran_staged = false;
    s.staged_out.clear();
  }
  s.last_outputs.clear();
  for (auto& out : pg.outputs) {
    const graph::ValueInfo* declared = nullptr;
    for (auto& o : model.graph().outputs)
      if (o.name == out.name) declared = &o;
    s.last_outputs.push_back(io_info(out, out.shape, declared));
  }
}

// cldl_session_enqueue / _run_async: the Session to enqueue. They return before the run ends, so they take
// plans without run-time decisions only: a staged plan waits for its first part and reads values back.
graph::Session& prepare_enqueue(SessionObj& s) {
  graph::Session& inner = plan_run(s);
  if (inner.model().staged())
    capi_fail(CLDL_ERROR_MODEL,
              "the model decides at run time ({}): the run waits on the host for that value, so it cannot be "
              "enqueued; run it with cldl_session_run (the app's bound buffers are read and written in place)",
              inner.model().rest_reason);
  bind_run(s, inner);
  return inner;
}

// A staged plan (run-time decisions: an If on computed data, a Loop's computed trip count or condition,
// NonZero / NonMaxSuppression / Unique outputs) through ModelSession's staged path, synchronously: host
// inputs uploaded, the app's bound inputs read in place, only the deciding values read back; the outputs
// stay on the device in their real shapes, and bound outputs get a device copy of them.
void run_staged(SessionObj& s) {
  graph::Model& model = *s.model->model;
  std::map<std::string, HostTensor> host;
  std::map<std::string, Tensor> dev;
  for (auto& in : model.graph().inputs) {
    const Shape& shape = s.shapes.at(in.name);  // plan_run's signature had every input's shape
    if (auto b = s.bound_in.find(in.name); b != s.bound_in.end()) {
      dev[in.name] = app_tensor(*s.model, in.name, in.dtype, shape, b->second.first, b->second.second);
      continue;
    }
    auto h = s.staged.find(in.name);
    if (h == s.staged.end())
      capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "input '{}' has a shape but no data: set it or bind a buffer", in.name);
    if (h->second.shape() != shape)
      capi_fail(CLDL_ERROR_SHAPE, "input '{}': its shape is {} (cldl_session_set_input_shape) but its data is {}",
                in.name, shape.str(), h->second.shape().str());
    host[in.name] = h->second;
  }
  s.last = nullptr;
  s.ran_staged = false;
  s.last_outputs.clear();
  try {
    s.session->run_on_device(host, dev, s.staged_out);
  } catch (const Error& e) {
    s.staged_out.clear();
    // Beside OpenCL failures, what a staged run raises is a stage's plan (the shapes data decided).
    if (e.cl_code() != 0) throw;
    capi_fail(CLDL_ERROR_SHAPE, "{}", e.what());
  }
  s.ran_staged = true;
  for (auto& out : model.graph().outputs) {
    graph::ValueInfo got = out;  // what the run made: dtype and shape
    got.dtype = s.staged_out.at(out.name).dtype;
    s.last_outputs.push_back(io_info(got, graph::ValueShape(s.staged_out.at(out.name).shape), &out));
  }
  // Bound outputs: a device copy each (their sizes are known only now; one too small fails, naming both
  // sizes, and leaves the outputs readable).
  std::vector<cl::Event> copies;
  for (auto& [name, b] : s.bound_out) {
    const Tensor& src = s.staged_out.at(name);
    Tensor dst = app_tensor(*s.model, name, src.dtype, src.shape, b.first, b.second);
    ExecutionContext ec(run_queue(*s.model));
    cl::Event ev;
    ec.signal = &ev;
    ec.label = fmt::format("output {}", name);
    model.context().copy_async(src, dst, ec);
    if (ev() != nullptr) copies.push_back(ev);
  }
  if (!copies.empty()) check(cl::Event::waitForEvents(copies), "clWaitForEvents", "bound outputs");
}

void need_last_run(SessionObj& s, const char* what) {
  if (!s.last && !s.ran_staged)
    capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "{}: the session has not run yet (or its last run failed)", what);
}

// Output `name` of the last run on the device (its real shape).
Tensor last_tensor(SessionObj& s, const std::string& name) {
  return s.ran_staged ? s.staged_out.at(name) : s.last->device_tensor(name);
}

const IoInfo& last_output(SessionObj& s, const char* name) {
  need(name, "name");
  find_io(*s.model, name, false);  // NOT_FOUND naming the model's outputs
  need_last_run(s, fmt::format("output '{}'", name).c_str());
  for (auto& io : s.last_outputs)
    if (io.name == name) return io;
  capi_fail(CLDL_ERROR_NOT_FOUND, "output '{}' was not produced by the last run", name);
}

struct CallbackData {
  cldl_session session;
  cldl_callback callback;
  void* user;
};

void CL_CALLBACK on_complete(cl_event, cl_int status, void* p) {
  std::unique_ptr<CallbackData> d(static_cast<CallbackData*>(p));
  d->callback(d->session, status < 0 ? CLDL_ERROR_OPENCL : CLDL_OK, d->user);
}

}  // namespace

extern "C" {

const char* cldl_version(void) { return CLDL_VERSION; }

const char* cldl_last_error(void) { return t_last_error.c_str(); }

const char* cldl_status_name(cldl_status s) {
  switch (s) {
    case CLDL_OK:
      return "CLDL_OK";
    case CLDL_ERROR_INVALID_ARGUMENT:
      return "CLDL_ERROR_INVALID_ARGUMENT";
    case CLDL_ERROR_INVALID_HANDLE:
      return "CLDL_ERROR_INVALID_HANDLE";
    case CLDL_ERROR_NOT_FOUND:
      return "CLDL_ERROR_NOT_FOUND";
    case CLDL_ERROR_SHAPE:
      return "CLDL_ERROR_SHAPE";
    case CLDL_ERROR_DTYPE:
      return "CLDL_ERROR_DTYPE";
    case CLDL_ERROR_OPENCL:
      return "CLDL_ERROR_OPENCL";
    case CLDL_ERROR_MODEL:
      return "CLDL_ERROR_MODEL";
    case CLDL_ERROR_INTERNAL:
      return "CLDL_ERROR_INTERNAL";
  }
  return "unknown cldl_status";
}

size_t cldl_dtype_size(cldl_dtype t) {
  if (int(t) < 0 || int(t) > int(CLDL_BOOL)) return 0;
  return dtype_size(DType(int(t)));
}

cldl_status cldl_device_count(size_t* count) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    need(count, "count");
    *count = all_devices().size();
  });
}

cldl_status cldl_device_get_info(size_t index, cldl_device_info* info) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    need(info, "info");
    auto& all = all_devices();
    if (index >= all.size())
      capi_fail(CLDL_ERROR_NOT_FOUND, "device index {} out of range ({} devices)", index, all.size());
    fill_device_info(all[index], info);
  });
}

cldl_status cldl_device_select(const char* spec, size_t* index) {
  return guarded(__func__, CLDL_ERROR_NOT_FOUND, [&] {
    need(index, "index");
    Device d = select_device(spec ? spec : "");
    auto& all = all_devices();
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i].device() == d.device()) {
        *index = i;
        return;
      }
    capi_fail(CLDL_ERROR_NOT_FOUND, "device '{}' is not among the enumerated devices", spec ? spec : "");
  });
}

cldl_status cldl_context_create(const char* spec, cldl_context* out) {
  return guarded(__func__, CLDL_ERROR_NOT_FOUND, [&] {
    need(out, "out");
    *out = nullptr;
    auto c = std::make_shared<ContextObj>();
    c->ctx = Context::create(spec ? spec : "");
    *out = reinterpret_cast<cldl_context>(add(registry().contexts, std::move(c)));
  });
}

cldl_status cldl_context_wrap(cl_context context, cl_command_queue queue, cldl_context* out) {
  return guarded(__func__, CLDL_ERROR_INVALID_ARGUMENT, [&] {
    need(out, "out");
    need(context, "context");
    need(queue, "queue");
    *out = nullptr;
    cl_context qctx = nullptr;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, nullptr);
    if (err != CL_SUCCESS)
      capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "queue is not a valid cl_command_queue ({})", cl_error_name(err));
    if (qctx != context) capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "the queue belongs to another cl_context");
    auto c = std::make_shared<ContextObj>();
    c->ctx = Context::wrap(context, queue);
    c->wrapped = true;
    *out = reinterpret_cast<cldl_context>(add(registry().contexts, std::move(c)));
  });
}

cldl_status cldl_context_release(cldl_context ctx) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] { drop(registry().contexts, ctx, "context"); });
}

cldl_status cldl_context_device_info(cldl_context ctx, cldl_device_info* info) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto c = get(ctx);
    need(info, "info");
    fill_device_info(c->ctx->device(0), info);
  });
}

cldl_status cldl_context_cl(cldl_context ctx, cl_context* context, cl_command_queue* queue) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto c = get(ctx);
    if (context) *context = c->ctx->cl()();
    if (queue) *queue = c->ctx->queue(0, 0)();
  });
}

void cldl_load_options_init(cldl_load_options* opts) {
  if (!opts) return;
  std::memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

cldl_status cldl_model_load(cldl_context ctx, const char* path, const cldl_load_options* opts, cldl_model* out) {
  return guarded(__func__, CLDL_ERROR_MODEL, [&] {
    need(out, "out");
    *out = nullptr;
    get(ctx);
    need(path, "path");
    *out = load_graph(ctx, graph::import_onnx_file(path), opts);
  });
}

cldl_status cldl_model_load_memory(cldl_context ctx, const void* data, size_t size, const cldl_load_options* opts,
                                   cldl_model* out) {
  return guarded(__func__, CLDL_ERROR_MODEL, [&] {
    need(out, "out");
    *out = nullptr;
    get(ctx);
    need(data, "data");
    graph::Graph g =
        graph::import_onnx_bytes(std::string(static_cast<const char*>(data), size), ".", "model in memory");
    *out = load_graph(ctx, std::move(g), opts);
  });
}

cldl_status cldl_model_release(cldl_model model) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] { drop(registry().models, model, "model"); });
}

cldl_status cldl_model_input_count(cldl_model model, size_t* count) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto m = get(model);
    need(count, "count");
    *count = m->inputs.size();
  });
}

cldl_status cldl_model_output_count(cldl_model model, size_t* count) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto m = get(model);
    need(count, "count");
    *count = m->outputs.size();
  });
}

cldl_status cldl_model_input_info(cldl_model model, size_t index, cldl_tensor_info* info) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto m = get(model);
    if (index >= m->inputs.size())
      capi_fail(CLDL_ERROR_NOT_FOUND, "input index {} out of range (the model has {})", index, m->inputs.size());
    fill_tensor_info(m->inputs[index], info);
  });
}

cldl_status cldl_model_output_info(cldl_model model, size_t index, cldl_tensor_info* info) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto m = get(model);
    if (index >= m->outputs.size())
      capi_fail(CLDL_ERROR_NOT_FOUND, "output index {} out of range (the model has {})", index, m->outputs.size());
    fill_tensor_info(m->outputs[index], info);
  });
}

cldl_status cldl_session_create(cldl_model model, cldl_session* out) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    need(out, "out");
    *out = nullptr;
    auto m = get(model);
    auto s = std::make_shared<SessionObj>();
    s->model = m;
    s->session = m->model->session();
    // Inputs whose shape the model fixes (or load options fixed) need no cldl_session_set_input_shape.
    for (auto& io : m->inputs) {
      bool complete = true;
      for (auto d : io.dims) complete = complete && d >= 0;
      if (complete) s->shapes[io.name] = Shape(io.dims);
    }
    *out = reinterpret_cast<cldl_session>(add(registry().sessions, std::move(s)));
  });
}

cldl_status cldl_session_release(cldl_session s) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto obj = get(s);
    {
      std::lock_guard lock(obj->m);
      if (obj->last) {
        const cl::Event& last = obj->last->last_run();
        if (last() != nullptr) last.wait();  // the run still uses the session's buffers
      }
    }
    drop(registry().sessions, s, "session");
  });
}

namespace {
Shape shape_arg(const char* name, const int64_t* dims, size_t rank) {
  if (rank && !dims) capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "input '{}': rank {} but dims is NULL", name, rank);
  Shape got(std::vector<int64_t>(dims, dims + rank));
  for (size_t i = 0; i < rank; ++i)
    if (got.dims[i] < 0) capi_fail(CLDL_ERROR_SHAPE, "input '{}': dimension {} is {}", name, i, got.dims[i]);
  return got;
}
}  // namespace

cldl_status cldl_session_set_input(cldl_session s, const char* name, cldl_dtype dtype, const int64_t* dims, size_t rank,
                                   const void* data, size_t bytes) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto obj = get(s);
    const IoInfo& io = find_io(*obj->model, name, true);
    if (dtype != io.dtype)
      capi_fail(CLDL_ERROR_DTYPE, "input '{}': expected {}, got {}", name, to_string(DType(int(io.dtype))),
                int(dtype) >= 0 && int(dtype) <= int(CLDL_BOOL) ? std::string(to_string(DType(int(dtype))))
                                                                : fmt::format("cldl_dtype {}", int(dtype)));
    Shape got = shape_arg(name, dims, rank);
    check_input_shape(io, declared_input(*obj->model, name), got);
    size_t want = size_t(got.numel()) * dtype_size(DType(int(dtype)));
    if (bytes != want)
      capi_fail(CLDL_ERROR_SHAPE, "input '{}': {} {} is {} bytes, got {}", name, to_string(DType(int(dtype))),
                got.str(), want, bytes);
    if (bytes) need(data, "data");
    HostTensor h(to_dtype(dtype), got);
    if (bytes) std::memcpy(h.data(), data, bytes);
    std::lock_guard lock(obj->m);
    obj->staged[name] = std::move(h);
    obj->shapes[name] = got;
    obj->bound_in.erase(name);
    for (auto& [serial, st] : obj->inner) st.written.erase(name);
  });
}

cldl_status cldl_session_set_input_shape(cldl_session s, const char* name, const int64_t* dims, size_t rank) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto obj = get(s);
    const IoInfo& io = find_io(*obj->model, name, true);
    Shape got = shape_arg(name, dims, rank);
    check_input_shape(io, declared_input(*obj->model, name), got);
    std::lock_guard lock(obj->m);
    obj->shapes[name] = got;
  });
}

namespace {
// bind_input / bind_output: the app's buffer (NULL unbinds) for `name`, used from the next run on.
cldl_status bind_io(const char* fn, cldl_session s, const char* name, cl_mem buffer, size_t offset, bool input) {
  return guarded(fn, CLDL_ERROR_INTERNAL, [&] {
    auto obj = get(s);
    const IoInfo& io = find_io(*obj->model, name, input);
    if (buffer) check_app_buffer(*obj->model, io, buffer, offset);
    std::lock_guard lock(obj->m);
    auto& map = input ? obj->bound_in : obj->bound_out;
    if (buffer)
      map[name] = {cl::Buffer(buffer, true), offset};
    else
      map.erase(name);
  });
}
}  // namespace

cldl_status cldl_session_bind_input(cldl_session s, const char* name, cl_mem buffer, size_t offset) {
  return bind_io(__func__, s, name, buffer, offset, true);
}

cldl_status cldl_session_bind_output(cldl_session s, const char* name, cl_mem buffer, size_t offset) {
  return bind_io(__func__, s, name, buffer, offset, false);
}

cldl_status cldl_session_run(cldl_session s) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto obj = get(s);
    cl::Event e;
    {
      std::lock_guard lock(obj->m);
      graph::Session& inner = plan_run(*obj);
      if (inner.model().staged()) return run_staged(*obj);
      bind_run(*obj, inner);
      e = inner.enqueue();
    }
    check(e.wait(), "clWaitForEvents", "model run");
  });
}

cldl_status cldl_session_enqueue(cldl_session s, cl_uint num_events, const cl_event* wait_list, cl_event* event) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto obj = get(s);
    if (num_events && !wait_list)
      capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "num_events is {} but wait_list is NULL", num_events);
    std::vector<cl::Event> waits;
    for (cl_uint i = 0; i < num_events; ++i) {
      if (!wait_list[i]) capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "wait_list[{}] is NULL", i);
      waits.emplace_back(wait_list[i], true);
    }
    std::lock_guard lock(obj->m);
    cl::Event e = prepare_enqueue(*obj).enqueue(waits);
    if (event) {
      check(clRetainEvent(e()), "clRetainEvent", "run event");
      *event = e();
    }
  });
}

cldl_status cldl_session_run_async(cldl_session s, cldl_callback callback, void* user_data) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto obj = get(s);
    if (!callback) capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "callback is NULL");
    cl::Event e;
    {
      std::lock_guard lock(obj->m);
      e = prepare_enqueue(*obj).enqueue();
    }
    // Outside the lock: a driver may call back at once, and the callback may call into this session.
    auto d = std::make_unique<CallbackData>(CallbackData{s, callback, user_data});
    check(e.setCallback(CL_COMPLETE, on_complete, d.get()), "clSetEventCallback", "run completion");
    d.release();  // on_complete owns it now
    // Some drivers call back only once the queue is flushed.
    check(run_queue(*obj->model).flush(), "clFlush", "run completion");
  });
}

cldl_status cldl_session_wait(cldl_session s) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto obj = get(s);
    cl::Event e;
    {
      std::lock_guard lock(obj->m);
      if (obj->last) e = obj->last->last_run();
    }
    if (e() != nullptr) check(e.wait(), "clWaitForEvents", "model run");
  });
}

cldl_status cldl_session_output_info(cldl_session s, const char* name, cldl_tensor_info* info) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto obj = get(s);
    std::lock_guard lock(obj->m);
    fill_tensor_info(last_output(*obj, name), info);
  });
}

cldl_status cldl_session_get_output(cldl_session s, const char* name, void* data, size_t bytes) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto obj = get(s);
    std::lock_guard lock(obj->m);
    const IoInfo& io = last_output(*obj, name);
    if (bytes < io.bytes)
      capi_fail(CLDL_ERROR_SHAPE, "output '{}' is {} bytes ({} {}); the buffer has {}", name, io.bytes,
                to_string(DType(int(io.dtype))), Shape(io.dims).str(), bytes);
    if (io.bytes) need(data, "data");
    if (obj->ran_staged) {  // the run is complete: read its bytes straight into the app's memory
      ExecutionContext ec(run_queue(*obj->model));
      cl::Event ev;
      ec.signal = &ev;
      ec.label = fmt::format("output {}", name);
      if (io.bytes) obj->model->model->context().read_async(obj->staged_out.at(name), data, io.bytes, ec);
      if (ev() != nullptr) check(ev.wait(), "clWaitForEvents", ec.label);
      return;
    }
    HostTensor h = obj->last->read_output(name);
    if (h.bytes()) std::memcpy(data, h.data(), h.bytes());
  });
}

cldl_status cldl_session_copy_output(cldl_session s, const char* name, cl_mem buffer, size_t offset, cl_uint num_events,
                                     const cl_event* wait_list, cl_event* event) {
  return guarded(__func__, CLDL_ERROR_INTERNAL, [&] {
    auto obj = get(s);
    need(buffer, "buffer");
    if (num_events && !wait_list)
      capi_fail(CLDL_ERROR_INVALID_ARGUMENT, "num_events is {} but wait_list is NULL", num_events);
    std::lock_guard lock(obj->m);
    const IoInfo& io = last_output(*obj, name);
    check_app_buffer(*obj->model, io, buffer, offset);
    Tensor dst = app_tensor(*obj->model, name, DType(int(io.dtype)), Shape(io.dims), cl::Buffer(buffer, true), offset);
    ExecutionContext ec(run_queue(*obj->model));
    for (cl_uint i = 0; i < num_events; ++i) ec.wait_for.emplace_back(wait_list[i], true);
    if (obj->last && obj->last->last_run()() != nullptr) ec.wait_for.push_back(obj->last->last_run());
    cl::Event ev;
    ec.signal = &ev;
    ec.label = fmt::format("output {}", name);
    obj->model->model->context().copy_async(last_tensor(*obj, name), dst, ec);
    if (ev() == nullptr)  // nothing to copy: a marker keeps the event contract
      check(ec.queue.enqueueMarkerWithWaitList(ec.waits(), &ev), "clEnqueueMarkerWithWaitList", ec.label);
    if (event) {
      check(clRetainEvent(ev()), "clRetainEvent", ec.label);
      *event = ev();
    }
  });
}

}  // extern "C"
