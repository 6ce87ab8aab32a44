// Shared by `cldl run` and `cldl profile`: the model options, loading (import, binding of shape inputs
// given on the command line, prepare, compile), input files / random inputs and output summaries.
#pragma once
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "models/executor.hpp"
#include "models/model.hpp"
#include "models/npy.hpp"
#include "models/onnx_import.hpp"
#include "models/op_registry.hpp"
#include "models/passes.hpp"
#include "runtime/bundle.hpp"

namespace cldl::cli {

struct ModelOptions {
  std::string model, device;
  std::vector<std::string> inputs, dims;
  bool random = false;
  int queues = 0;  // 0: graph::queues_for (one on a CPU device, two on others)
  std::string rnn_strategy = "auto";
  std::string binaries;  // offline bundle folder (`cldl compile model.onnx --out DIR`); no source compiled
  std::vector<std::string> place;  // NODE=DEV placement rules (graph::resolve_placement)

  void add(CLI::App* cmd) {
    cmd->add_option("model", model, "ONNX model file")->required();
    cmd->add_option("-d,--device", device, "Device spec (cpu, gpu, P:D, name)")->envname("CLDL_DEVICE");
    cmd->add_option("-i,--input", inputs, "NAME=FILE (.npy or ONNX .pb tensor)");
    cmd->add_option("--dim", dims, "NAME=VALUE for a symbolic input dimension");
    cmd->add_flag("--random", random, "Fill the inputs not given with random data");
    cmd->add_option("--queues", queues, "In-order queues per device for independent branches (0: one on a CPU, two on others)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--rnn-strategy", rnn_strategy, "RNN/LSTM/GRU nodes: auto, sequential, time, layer, data, wave")
        ->check(CLI::IsMember({"auto", "sequential", "time", "layer", "data", "wave"}));
    cmd->add_option("--binaries", binaries, "Load every program from this offline bundle (cldl compile --out); "
                    "compile no kernel source");
    cmd->add_option("--place", place, "NODE=DEV: run the nodes named NODE (a name, a glob such as 'conv*', or "
                    "op:TYPE) on device DEV of --device (e.g. -d cpu:0,cpu:1); repeatable, the last match wins");
  }
};

inline std::pair<std::string, std::string> split_eq(const std::string& s, const char* what) {
  auto p = s.find('=');
  if (p == std::string::npos || p == 0) fail("{} '{}' should be NAME=VALUE", what, s);
  return {s.substr(0, p), s.substr(p + 1)};
}

inline HostTensor random_input(const graph::ValueInfo& v, uint32_t seed) {
  Shape s = v.shape.to_shape();
  std::mt19937 rng(seed);
  std::vector<double> d(size_t(s.numel()));
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto& x : d) x = v.dtype == DType::f32 || v.dtype == DType::f16 ? u(rng) : 0.0;
  return graph::from_doubles(v.dtype, s, d);
}

// Symbolic input dimensions not given by --dim: taken from an input file of the same rank when one is
// given, else (with --random) bound to 1 and said on stderr; anything left makes prepare() fail naming it.
inline void bind_open_dims(graph::Graph& g, const std::map<std::string, HostTensor>& given, bool random,
                           graph::PrepareOptions& po) {
  for (auto& in : g.inputs) {
    auto file = given.find(in.name);
    for (size_t i = 0; i < in.shape.dims.size(); ++i) {
      if (in.shape.dims[i] >= 0) continue;
      const std::string sym = i < in.shape.symbols.size() ? in.shape.symbols[i] : std::string();
      if (!sym.empty() && po.dims.count(sym)) continue;
      int64_t v = -1;
      if (file != given.end() && file->second.shape().rank() == in.shape.dims.size())
        v = file->second.shape()[int64_t(i)];
      else if (random) {
        v = 1;
        fmt::print(stderr, "{}=1 (unbound, --random)\n", sym.empty() ? fmt::format("{}[{}]", in.name, i) : sym);
      }
      if (v < 0) continue;
      if (sym.empty()) in.shape.dims[i] = v;
      else po.dims[sym] = v;
    }
  }
}

struct LoadedModel {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<graph::Model> graph_model;   // the loaded model (any input shapes)
  std::shared_ptr<graph::CompiledModel> model; // its plan for the inputs below
  std::map<std::string, HostTensor> inputs;    // the plan's inputs (shape-deciding ones are in the plan)
  std::map<std::string, HostTensor> all_inputs;  // every model input (what a ModelSession takes)
  graph::PassStats passes;
  double load_ms = 0;
};

// Runs a loaded model on its inputs, every stage of it: a plan's Session, or, for a staged plan (a
// decision that needs run-time data, whose later stages are planned from that data), a ModelSession.
class ModelRunner {
 public:
  explicit ModelRunner(const LoadedModel& lm) : lm_(&lm) {
    if (lm.model->staged()) staged_ = lm.graph_model->session();
    else plain_ = lm.model->session();
  }
  std::map<std::string, HostTensor> run(Profiler* profiler = nullptr) {
    return staged_ ? staged_->run(lm_->all_inputs, profiler) : plain_->run(lm_->inputs, profiler);
  }

 private:
  const LoadedModel* lm_;
  std::unique_ptr<graph::Session> plain_;
  std::unique_ptr<graph::ModelSession> staged_;
};

// Loads the model once (graph::Model) and plans the signature of the inputs: files given with --input,
// the rest random (--random) with the dims of --dim, of an input file of the same rank, or 1.
inline LoadedModel load_for_cli(const ModelOptions& o, bool profiling) {
  auto t0 = std::chrono::steady_clock::now();
  LoadedModel lm;
  std::map<std::string, HostTensor> given;
  for (auto& i : o.inputs) {
    auto [name, file] = split_eq(i, "--input");
    given[name] = graph::read_tensor_file(file);
  }
  graph::PrepareOptions po;
  for (auto& d : o.dims) {
    auto [name, value] = split_eq(d, "--dim");
    try {
      po.dims[name] = std::stoll(value);
    } catch (const std::exception&) {
      fail("--dim {}: '{}' is not an integer", name, value);
    }
  }
  graph::Graph g = graph::import_onnx_file(o.model);
  // The CLI reads and writes tensors: a sequence or optional model value is named here, not met later.
  for (auto* list : {&g.inputs, &g.outputs})
    for (auto& v : *list)
      if (v.composite())
        fail("{} '{}' is {}: the CLI takes and writes tensors; run the model from C++ (ModelSession::run_values) "
             "or Python (cldl.InferenceSession: lists and None)",
             list == &g.inputs ? "input" : "output", v.name,
             v.optional ? (v.sequence ? "an optional sequence" : "an optional tensor") : "a sequence of tensors");
  for (auto& [name, t] : given)
    if (!g.is_input(name)) fail("--input {}: the model has no input of that name", name);
  graph::Graph shapes_of = g;  // the inputs' dims as the command line fixes them
  bind_open_dims(shapes_of, given, o.random, po);
  graph::bind_inputs(shapes_of, graph::PrepareOptions{.bind = {}, .dims = po.dims}, true);
  std::vector<std::string> missing;
  for (auto& in : shapes_of.inputs) {
    if (given.count(in.name)) lm.inputs[in.name] = given[in.name];
    else if (o.random) lm.inputs[in.name] = random_input(in, uint32_t(lm.inputs.size() + 1));
    else missing.push_back(fmt::format("{} ({} {})", in.name, to_string(in.dtype), in.shape.str()));
  }
  if (!missing.empty()) fail("inputs not given (use --input NAME=FILE or --random): {}", fmt::join(missing, ", "));
  lm.ctx = Context::create(o.device);
  if (!o.binaries.empty()) use_bundle(lm.ctx->device(), o.binaries);
  graph::ModelOptions mo;
  mo.compile = graph::CompileOptions{.device = 0, .queues = o.queues, .profiling = profiling, .rnn_strategy = o.rnn_strategy};
  for (auto& p : o.place) mo.compile.placement.push_back(graph::parse_placement_rule(p));
  lm.graph_model = graph::Model::create(lm.ctx, std::move(g), mo);
  graph::Signature sig = lm.graph_model->signature(lm.inputs);
  lm.model = lm.graph_model->plan(sig);
  lm.passes = lm.model->passes;
  lm.all_inputs = lm.inputs;
  for (auto& [name, v] : sig.values) lm.inputs.erase(name);
  lm.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return lm;
}

inline double elapsed_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Model latency, shared by `cldl run --bench` and `cldl bench model.onnx`: one first run (programs
// built, buffers touched) timed on its own, `warmup` more untimed, then `runs` timed ones. Every run
// copies the inputs to the device and the outputs back.
struct ModelLatency {
  double first_ms = 0, min_ms = 0, median_ms = 0, max_ms = 0;
  int runs = 0, warmup = 0;
};
ModelLatency time_model(LoadedModel& lm, int runs, int warmup,
                        std::map<std::string, HostTensor>* first_outputs = nullptr);
// One JSON object (model, device, runs, min/median/max_ms, first_run_ms, load_ms) on stdout, or a line.
nlohmann::json latency_json(const ModelOptions& mo, const LoadedModel& lm, const ModelLatency& t);
void print_model_latency(const ModelOptions& mo, const LoadedModel& lm, const ModelLatency& t, bool json);
// `cldl bench model.onnx ...` (tools/cldl/bench_models.cpp).
// With `compare`, ONNX Runtime (tools/bench/model_onnxruntime.py, the CPU's core count of intra-op threads)
// and, where installed, OpenVINO's CPU plugin run the same inputs in alternating rounds: one timed run
// each per round, medians and the per-round ratio peer / cldl.
void bench_model(ModelOptions mo, int runs, int warmup, bool json, bool compare = false);
// `cldl bench FOLDER`: bench_model over every FOLDER/*.onnx, inputs from NAME.json beside it
// ({"inputs": {name: [dtype, shape]}}, as tools/bench/export_models.py writes) or random ones with the
// dims of `base`; then per-model ratios and their geometric mean. A model that fails is listed with its
// error, and the command fails after the summary.
void bench_folder(const std::string& dir, const ModelOptions& base, int runs, int warmup, bool json, bool compare);

}  // namespace cldl::cli
