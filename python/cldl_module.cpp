// The native half of the Python package `cldl` (python/cldl/__init__.py builds onnxruntime's API on it):
// devices(), default_device(), Model(path or bytes, device, dims, queues) with inputs, outputs, graph_name,
// metadata, run({name: ndarray}) -> {name: ndarray} (any input shapes; a plan per signature, cached) and
// bench(); Trainer(path, input, output, loss, optimizer, lr, batch, seed, devices, ...) with step / epoch / weights /
// save (models/train.hpp). cldl errors surface as cldl.Error (a RuntimeError) carrying cldl's message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "models/model.hpp"
#include "models/onnx_import.hpp"
#include "models/op_registry.hpp"
#include "models/train.hpp"
#include "runtime/cldl.hpp"

namespace py = pybind11;

namespace {

using namespace cldl;

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::f32: return py::dtype("float32");
    case DType::f16: return py::dtype("float16");
    case DType::i32: return py::dtype("int32");
    case DType::i64: return py::dtype("int64");
    case DType::u8: return py::dtype("uint8");
    case DType::boolean: return py::dtype("bool");
    case DType::i8: return py::dtype("int8");
    case DType::i16: return py::dtype("int16");
    case DType::u16: return py::dtype("uint16");
    case DType::u32: return py::dtype("uint32");
    case DType::u64: return py::dtype("uint64");
    case DType::f64: return py::dtype("float64");
    default: throw Error(fmt::format("cldl {} tensors have no numpy dtype", to_string(t)));
  }
}

py::array to_numpy(const HostTensor& h) {
  py::array a(numpy_dtype(h.dtype()), std::vector<py::ssize_t>(h.shape().dims.begin(), h.shape().dims.end()));
  if (h.bytes()) std::memcpy(a.mutable_data(), h.data(), h.bytes());
  return a;
}

HostTensor from_numpy(const std::string& name, const py::handle& obj) {
  py::array a = py::array::ensure(obj, py::array::c_style);
  if (!a) throw Error(fmt::format("input '{}': not convertible to a numpy array", name));
  std::string dt = py::str(a.dtype().attr("name"));
  DType t;
  try {
    t = parse_dtype(dt);
  } catch (const Error&) {
    throw Error(
        fmt::format("input '{}': numpy dtype {} has no cldl dtype (use float32, float16, float64, "
                    "int8/16/32/64, uint8/16/32/64 or bool)",
                    name, dt));
  }
  Shape s(std::vector<int64_t>(a.shape(), a.shape() + a.ndim()));
  HostTensor h(t, s);
  if (h.bytes()) std::memcpy(h.data(), a.data(), h.bytes());
  return h;
}

struct TensorInfo {
  std::string name;
  py::dtype dtype;
  py::tuple shape;    // ints; None where symbolic (unless load's dims fixed it)
  py::tuple symbols;  // per dim: None, or the symbol the model file declares for it
  std::string kind = "tensor";  // "tensor", "sequence", "optional" (of a tensor), "optional_sequence"
  std::string repr() const {
    return fmt::format("TensorInfo(name='{}', kind='{}', dtype={}, shape={}, symbols={})", name, kind,
                       py::repr(dtype).cast<std::string>(), py::repr(shape).cast<std::string>(),
                       py::repr(symbols).cast<std::string>());
  }
};

TensorInfo tensor_info(const graph::ValueInfo& v, const graph::ValueShape& shape,
                       const std::vector<graph::ValueInfo>& declared) {
  TensorInfo r{v.name, numpy_dtype(v.dtype), py::tuple(), py::tuple()};
  r.kind = v.optional ? (v.sequence ? "optional_sequence" : "optional") : v.sequence ? "sequence" : "tensor";
  const graph::ValueInfo* d = nullptr;
  for (auto& x : declared)
    if (x.name == v.name) d = &x;
  py::list dims, symbols;
  for (size_t i = 0; shape.known && i < shape.dims.size(); ++i) {
    if (shape.dims[i] >= 0) dims.append(shape.dims[i]);
    else dims.append(py::none());
    if (d && d->shape.known && d->shape.dims.size() == shape.dims.size() && d->shape.dims[i] < 0)
      symbols.append(i < d->shape.symbols.size() && !d->shape.symbols[i].empty() ? d->shape.symbols[i] : "?");
    else
      symbols.append(py::none());
  }
  r.shape = py::tuple(dims);
  r.symbols = py::tuple(symbols);
  return r;
}

class Model {
 public:
  // `model`: a path (str) or the model file's bytes (external data then resolves from the working folder).
  Model(const py::object& model, const std::optional<std::string>& device, const std::map<std::string, int64_t>& dims,
        int queues) {
    graph::Graph g = py::isinstance<py::bytes>(model)
                         ? graph::import_onnx_bytes(model.cast<std::string>(), ".", "model bytes")
                         : graph::import_onnx_file(py::str(model).cast<std::string>());
    graph_name_ = g.name;
    metadata_ = g.metadata;
    auto declared_in = g.inputs, declared_out = g.outputs;
    graph::ModelOptions mo;
    mo.prepare.dims = dims;
    mo.compile.queues = queues;
    model_ = graph::Model::create(Context::create(device.value_or("")), std::move(g), mo);
    session_ = model_->session();
    auto pre = model_->preplanned();
    auto shape_of = [&](const graph::ValueInfo& v, bool input) {
      if (pre)
        for (auto& x : input ? pre->graph().inputs : pre->graph().outputs)
          if (x.name == v.name) return x.shape;
      return v.shape;
    };
    for (auto& v : model_->graph().inputs) inputs_.push_back(tensor_info(v, shape_of(v, true), declared_in));
    for (auto& v : model_->graph().outputs) outputs_.push_back(tensor_info(v, shape_of(v, false), declared_out));
  }

  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  std::string device() const { return device_info().name; }
  std::string device_type() const { return std::string(to_string(device_info().type)); }
  const std::string& graph_name() const { return graph_name_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Plans cached, their capacity, hits / misses / evictions and the last plan's time, phase by phase.
  py::dict plan_cache() const {
    auto st = model_->plan_cache_stats();
    py::dict r;
    r["plans"] = st.plans;
    r["capacity"] = st.capacity;
    r["hits"] = st.hits;
    r["misses"] = st.misses;
    r["evictions"] = st.evictions;
    r["last_plan_ms"] = st.last_plan_ms;
    const auto& ph = st.last_plan_phases;  // ms per phase (models/plan_phases.hpp)
    py::dict phases;
    phases["copy"] = ph.copy_ms;
    phases["infer"] = ph.infer_ms;
    phases["fusion"] = ph.fusion_ms;
    phases["dead"] = ph.dead_ms;
    phases["device_fold"] = ph.device_fold_ms;
    phases["lowering"] = ph.lowering_ms;
    phases["memory_plan"] = ph.memory_plan_ms;
    phases["constants"] = ph.constants_ms;
    phases["compile"] = ph.compile_ms;
    r["last_plan_phases"] = phases;
    return r;
  }
  void set_plan_cache(size_t n) { model_->set_plan_cache(n); }

  // Tensors as ndarrays; a sequence input as a list of ndarrays, an absent optional as None (outputs the
  // same way).
  py::dict run(const py::dict& feeds) {
    std::map<std::string, graph::ModelValue> in;
    for (auto [k, v] : feeds) {
      std::string name = py::str(k);
      if (v.is_none()) {
        in[name] = graph::ModelValue::none();
      } else if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
        std::vector<HostTensor> items;
        size_t i = 0;
        for (auto item : v) items.push_back(from_numpy(fmt::format("{}[{}]", name, i++), item));
        in[name] = graph::ModelValue::sequence_of(std::move(items));
      } else {
        in[name] = graph::ModelValue::of(from_numpy(name, v));
      }
    }
    std::map<std::string, graph::ModelValue> out;
    {
      py::gil_scoped_release nogil;
      out = session_->run_values(in);
    }
    py::dict r;
    for (auto& [name, v] : out) {
      if (v.kind == graph::ModelValue::Kind::tensor) {
        r[py::str(name)] = to_numpy(v.tensor);
      } else if (v.kind == graph::ModelValue::Kind::none) {
        r[py::str(name)] = py::none();
      } else {
        py::list items;
        for (auto& h : v.items) items.append(to_numpy(h));
        r[py::str(name)] = items;
      }
    }
    return r;
  }

  // Host-to-host latency of run() (uploads, the model, downloads), in milliseconds.
  py::dict bench(const std::optional<py::dict>& feeds, int warmup, int iters) {
    if (iters < 1) throw Error(fmt::format("bench: iters must be at least 1, got {}", iters));
    std::map<std::string, HostTensor> in;
    if (feeds)
      in = convert(*feeds);
    else
      in = random_inputs();
    std::vector<double> ms;
    {
      py::gil_scoped_release nogil;
      for (int i = 0; i < warmup; ++i) session_->run(in);
      for (int i = 0; i < iters; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        session_->run(in);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    double mean = 0;
    for (double x : ms) mean += x / double(ms.size());
    py::dict r;
    r["iters"] = iters;
    r["mean_ms"] = mean;
    r["median_ms"] = sorted[sorted.size() / 2];
    r["min_ms"] = sorted.front();
    r["device"] = device();
    return r;
  }

 private:
  std::map<std::string, HostTensor> convert(const py::dict& feeds) {
    std::map<std::string, HostTensor> in;
    for (auto [k, v] : feeds) {
      std::string name = py::str(k);
      in[name] = from_numpy(name, v);
    }
    return in;
  }
  std::map<std::string, HostTensor> random_inputs() {
    std::map<std::string, HostTensor> in;
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (size_t k = 0; k < model_->graph().inputs.size(); ++k) {
      auto& v = model_->graph().inputs[k];
      std::vector<int64_t> dims;  // symbolic dims not fixed at load: 1
      for (auto& d : inputs_[k].shape) dims.push_back(d.is_none() ? 1 : d.cast<int64_t>());
      HostTensor h(v.dtype, Shape(dims));
      if (v.dtype == DType::f32)
        for (auto& x : h.span<float>()) x = u(rng);
      else
        std::memset(h.data(), 0, h.bytes());
      in[v.name] = std::move(h);
    }
    return in;
  }

  const DeviceInfo& device_info() const { return model_->context_ptr()->device(model_->options().compile.device).info; }

  std::shared_ptr<graph::Model> model_;
  std::unique_ptr<graph::ModelSession> session_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::string graph_name_;
  std::map<std::string, std::string> metadata_;
};

// A model's trainer (models/train.hpp) over numpy arrays: float64 data and int32 class ids are converted to the
// float32 / int64 the training graph takes (numpy's defaults), anything else is the Trainer's error.
class Trainer {
 public:
  Trainer(const std::string& model, const std::optional<std::string>& input, const std::optional<std::string>& output,
          const std::string& loss, const std::string& optimizer, std::optional<float> lr, int64_t batch, uint64_t seed,
          const py::object& devices, float momentum, bool nesterov, float weight_decay, int64_t batch_axis,
          bool shuffle, const std::string& schedule, int64_t warmup, int64_t total_steps, float min_lr, float clip_norm,
          const std::string& parallel, int64_t time_chunks)
      : path_(model) {
    graph::TrainOptionNames names;  // cldl train's options, checked by the one parser (models/train.hpp)
    names.input = input.value_or("");
    names.output = output.value_or("");
    names.loss = loss;
    names.optimizer = optimizer;
    names.lr = lr;
    names.batch = batch;
    names.seed = seed;
    names.momentum = momentum;
    names.nesterov = nesterov;
    names.weight_decay = weight_decay;
    names.batch_axis = batch_axis;
    names.shuffle = shuffle;
    names.schedule = schedule;
    names.warmup = warmup;
    names.total_steps = total_steps;
    names.min_lr = min_lr;
    names.clip_norm = clip_norm;
    names.parallel = parallel;
    names.time_chunks = time_chunks;
    graph::TrainOptions o = graph::parse_train_options(names);
    // devices: a spec ("cpu", "cpu:0,cpu:1") or a list of specs; several train data parallel (or layer parallel).
    std::string spec;
    if (devices.is_none()) {
    } else if (py::isinstance<py::str>(devices)) {
      spec = devices.cast<std::string>();
    } else {
      for (auto d : devices) spec += (spec.empty() ? "" : ",") + py::str(d).cast<std::string>();
      if (spec.empty()) throw Error("Trainer: devices is an empty list");
    }
    auto ctx = Context::create(spec);
    for (size_t d = 0; d < ctx->device_count() && ctx->device_count() > 1; ++d) o.devices.push_back(int(d));
    loss_ = o.loss;
    for (size_t d = 0; d < ctx->device_count(); ++d) devices_.push_back(ctx->device(int(d)).info.name);
    trainer_ = std::make_unique<graph::Trainer>(ctx, graph::import_onnx_file(model), o);
  }

  float step(const py::handle& x, const py::handle& y) {
    auto [xs, ys] = convert(x, y);
    py::gil_scoped_release nogil;
    return trainer_->step(xs, ys);
  }

  py::dict epoch(const py::handle& x, const py::handle& y) {
    auto [xs, ys] = convert(x, y);
    graph::EpochResult r;
    {
      py::gil_scoped_release nogil;
      r = trainer_->epoch(xs, ys);
    }
    py::dict d;
    d["losses"] = to_numpy(HostTensor::from<float>(Shape{int64_t(r.step_losses.size())}, r.step_losses));
    d["mean_loss"] = r.mean_loss;
    d["seconds"] = r.seconds;
    return d;
  }

  py::dict weights() {
    std::map<std::string, HostTensor> w;
    {
      py::gil_scoped_release nogil;
      w = trainer_->read_weights();
    }
    py::dict d;  // in the model's order
    for (auto& name : trainer_->weights()) d[py::str(name)] = to_numpy(w.at(name));
    return d;
  }

  void save(const std::string& path) {
    py::gil_scoped_release nogil;
    trainer_->save_onnx(path_, path);
  }

  int64_t steps() const { return trainer_->steps_done(); }
  const std::vector<std::string>& devices() const { return devices_; }

 private:
  std::pair<HostTensor, HostTensor> convert(const py::handle& x, const py::handle& y) {
    HostTensor xs = from_numpy("x", x), ys = from_numpy("y", y);
    if (xs.dtype() == DType::f64) xs = graph::cast_host(xs, DType::f32);
    if (loss_ == graph::TrainLoss::cross_entropy && ys.dtype() == DType::i32) ys = graph::cast_host(ys, DType::i64);
    if (loss_ == graph::TrainLoss::mse && ys.dtype() == DType::f64) ys = graph::cast_host(ys, DType::f32);
    return {std::move(xs), std::move(ys)};
  }

  std::string path_;
  graph::TrainLoss loss_ = graph::TrainLoss::cross_entropy;
  std::vector<std::string> devices_;
  std::unique_ptr<graph::Trainer> trainer_;
};

py::dict device_dict(const Device& d) {
  py::dict x;
  x["id"] = d.id();
  x["name"] = d.info.name;
  x["vendor"] = d.info.vendor;
  x["type"] = std::string(to_string(d.info.type));
  x["platform"] = d.info.platform_name;
  x["driver_version"] = d.info.driver_version;
  x["compute_units"] = d.info.compute_units;
  x["global_mem_bytes"] = d.info.global_mem_bytes;
  x["fp16"] = d.info.fp16;
  return x;
}

py::list devices() {
  py::list r;
  for (auto& d : all_devices()) r.append(device_dict(d));
  return r;
}

}  // namespace

PYBIND11_MODULE(_cldl, m) {
  m.doc() = "cldl's native module; use the package cldl (cldl.InferenceSession)";
  py::register_exception<cldl::Error>(m, "Error", PyExc_RuntimeError);
#ifdef CLDL_VERSION
  m.attr("__version__") = CLDL_VERSION;
#endif
  m.def("devices", &devices, "Every OpenCL device: list of dicts (id, name, vendor, type, platform, ...)");
  m.def(
      "default_device", [](const std::string& spec) { return device_dict(select_device(spec)); },
      py::arg("spec") = "", "The device a spec picks (\"\": CLDL_DEVICE, else GPU > accelerator > CPU)");
  py::class_<TensorInfo>(m, "TensorInfo")
      .def_readonly("name", &TensorInfo::name)
      .def_readonly("dtype", &TensorInfo::dtype)
      .def_readonly("shape", &TensorInfo::shape)
      .def_readonly("symbols", &TensorInfo::symbols)
      .def_readonly("kind", &TensorInfo::kind)
      .def("__repr__", &TensorInfo::repr);
  py::class_<Model>(m, "Model")
      .def(py::init<const py::object&, const std::optional<std::string>&, const std::map<std::string, int64_t>&, int>(),
           py::arg("model"), py::arg("device") = py::none(), py::arg("dims") = std::map<std::string, int64_t>{},
           py::arg("queues") = 0,
           "Loads an ONNX model (path or bytes) for a device spec (as the CLI's --device); dims (optional) plans "
           "one signature of symbolic input dimensions at load")
      .def_property_readonly("inputs", &Model::inputs)
      .def_property_readonly("outputs", &Model::outputs)
      .def_property_readonly("device", &Model::device)
      .def_property_readonly("device_type", &Model::device_type)
      .def_property_readonly("graph_name", &Model::graph_name)
      .def_property_readonly("metadata", &Model::metadata)
      .def_property_readonly("plan_cache", &Model::plan_cache,
                             "Plans cached per input-shape signature: plans, capacity, hits, misses, evictions, "
                             "last_plan_ms, last_plan_phases (ms: copy, infer, fusion, dead, device_fold, "
                             "lowering, memory_plan, constants, compile)")
      .def("set_plan_cache", &Model::set_plan_cache, py::arg("capacity"), "Most plans kept (LRU); at least 1")
      .def("run", &Model::run, py::arg("inputs"), "Runs the model: {name: ndarray} -> {name: ndarray}")
      .def("bench", &Model::bench, py::arg("inputs") = py::none(), py::arg("warmup") = 3, py::arg("iters") = 20,
           "Times run() (host to host); random inputs when none are given");
  py::class_<Trainer>(m, "Trainer")
      .def(py::init<const std::string&, const std::optional<std::string>&, const std::optional<std::string>&,
                    const std::string&, const std::string&, std::optional<float>, int64_t, uint64_t, const py::object&,
                    float, bool, float, int64_t, bool, const std::string&, int64_t, int64_t, float, float,
                    const std::string&, int64_t>(),
           py::arg("model"), py::arg("input") = py::none(), py::arg("output") = py::none(),
           py::arg("loss") = "cross_entropy", py::arg("optimizer") = "sgd", py::arg("lr") = py::none(),
           py::arg("batch") = 32, py::arg("seed") = 0, py::arg("devices") = py::none(), py::arg("momentum") = 0.9f,
           py::arg("nesterov") = false, py::arg("weight_decay") = 0.0f, py::arg("batch_axis") = 0,
           py::arg("shuffle") = true, py::arg("schedule") = "constant", py::arg("warmup") = 0,
           py::arg("total_steps") = 0, py::arg("min_lr") = 0.0f, py::arg("clip_norm") = 0.0f,
           py::arg("parallel") = "data", py::arg("time_chunks") = 0,
           "Trains every float initializer of an ONNX model (cldl train's options; devices: a spec or a list, "
           "several train data parallel, or layer parallel with parallel='layers'; schedule 'cosine' decays over "
           "total_steps)")
      .def("step", &Trainer::step, py::arg("x"), py::arg("y"), "One step on one batch; returns its loss")
      .def("epoch", &Trainer::epoch, py::arg("x"), py::arg("y"),
           "One pass in batches: {'losses': per step, 'mean_loss', 'seconds'}")
      .def("weights", &Trainer::weights, "The current weights: {name: ndarray}, in the model's order")
      .def("save", &Trainer::save, py::arg("path"), "Writes the model file with the trained weights")
      .def_property_readonly("steps", &Trainer::steps)
      .def_property_readonly("devices", &Trainer::devices);
}
