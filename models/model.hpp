// Model and plans: a model is loaded once, a plan is made once per signature of input shapes.
//
//   Model (once per load)     import, bind what the caller fixes, the shape-independent passes
//                             (prepare_structure); symbolic input dims stay symbolic.
//   Plan  (once per signature) the model's graph with concrete input shapes (and the values of the inputs
//                             that decide shapes): shape inference with folding of the shape subgraphs,
//                             the typed fusion passes, lowering (algorithms, programs from the cache), the
//                             memory plan. A plan is a CompiledModel (executor.hpp).
//   ModelSession              runs a model with any input shapes the graph allows: it finds the plan of
//                             the inputs' signature (made on first sight) and runs that plan's Session.
//
// Plans live in a bounded LRU cache per model (ModelOptions::plan_cache); an evicted plan frees its
// device memory once no session runs it, and sessions drop their state for plans the model evicted.
// The model's own initializers are uploaded once per device and shared by all its plans.
#pragma once
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "models/executor.hpp"
#include "models/passes.hpp"
#include "models/plan_phases.hpp"

namespace cldl::graph {

struct ModelOptions {
  // bind: inputs fixed for the model's life (they become constants). dims: a signature planned at load
  // (a warm-up, as `cldl run --dim`); symbols it does not name stay symbolic.
  PrepareOptions prepare;
  CompileOptions compile;
  size_t plan_cache = 8;  // most plans kept (least recently used evicted); at least 1
  // Inputs whose values join the signature besides those shape_deciding_inputs finds (a staged plan's
  // rest: the value its first decision needs).
  std::vector<std::string> decide_by_value = {};
};
// Kept for callers of load_onnx_model.
using LoadOptions = ModelOptions;

// What a plan is specialised for: the shape of every input of Model::graph() and the values of its
// shape-deciding inputs.
struct Signature {
  std::vector<Shape> shapes;                  // per Model::graph().inputs
  std::map<std::string, HostTensor> values;   // shape-deciding input -> value
  std::map<std::string, std::vector<Shape>> sequences;  // sequence input -> its tensors' shapes
  std::set<std::string> absent;               // optional inputs left out
  std::string key;                            // canonical text of all, the cache key
};

// The plan's input for element `k` of sequence input `name`: "name[k]".
std::string sequence_item_input(const std::string& name, size_t k);

struct PlanCacheStats {
  size_t plans = 0, capacity = 0;
  uint64_t hits = 0, misses = 0, evictions = 0;
  double last_plan_ms = 0;      // wall time of the last plan made
  PlanPhases last_plan_phases;  // where it went (plan_phases.hpp)
};

class ModelSession;

class Model : public std::enable_shared_from_this<Model> {
 public:
  // `g` as imported. Runs the shape-independent passes; plans opts.prepare.dims' signature when it (or the
  // graph itself) fixes every input dim, so a fixed-shape model reports its errors at load.
  static std::shared_ptr<Model> create(std::shared_ptr<Context> ctx, Graph g, const ModelOptions& opts = {});

  const Graph& graph() const { return graph_; }  // symbolic input dims as declared
  const std::vector<std::string>& shape_inputs() const { return shape_inputs_; }
  Context& context() { return *ctx_; }
  std::shared_ptr<Context> context_ptr() const { return ctx_; }
  const ModelOptions& options() const { return opts_; }

  // The signature of a run's inputs: every input present with the model's dtype and rank, fixed dims
  // equal, one value per symbol across inputs. Errors name the input, the dim and what was expected.
  Signature signature(const std::map<std::string, Shape>& shapes,
                      const std::map<std::string, HostTensor>& values) const;
  Signature signature(const std::map<std::string, HostTensor>& inputs) const;
  // With sequence inputs and absent optionals (an optional input left out of the map is absent too).
  Signature signature(const std::map<std::string, ModelValue>& inputs) const;
  // The plan of a signature: cached, or made now (errors name the signature and the node at fault; a
  // failed plan is not cached, and the model stays usable).
  std::shared_ptr<CompiledModel> plan(const Signature& sig);
  // The plan made at load, or null when the model has symbolic dims that nothing fixed.
  std::shared_ptr<CompiledModel> preplanned() const { return preplanned_; }
  // Whether `p` is still in the plan cache (sessions drop their state for evicted plans).
  bool holds(const CompiledModel* p) const;
  void set_plan_cache(size_t capacity);  // evicts down to it
  PlanCacheStats plan_cache_stats() const;

  std::unique_ptr<ModelSession> session();

 private:
  Model() = default;
  std::shared_ptr<CompiledModel> make_plan(const Signature& sig);
  Signature make_signature(const std::map<std::string, Shape>& shapes, const std::map<std::string, HostTensor>& values,
                           const std::map<std::string, std::vector<Shape>>& sequences) const;
  // The plan of the nodes before a decision that needs run-time data, with a Model of the rest.
  std::shared_ptr<CompiledModel> make_staged(Graph g, PlanBoundary b);
  void evict_to(size_t capacity);  // under mu_

  std::shared_ptr<Context> ctx_;
  Graph graph_;
  ModelOptions opts_;
  std::vector<std::string> shape_inputs_;
  PassStats structure_;  // what prepare_structure did at load
  std::shared_ptr<ConstantCache> constants_;
  std::shared_ptr<CompiledModel> preplanned_;

  mutable std::mutex mu_;       // the cache
  std::mutex planning_;         // one plan made at a time (a second thread wanting it waits, then hits)
  std::list<std::pair<std::string, std::shared_ptr<CompiledModel>>> lru_;  // most recent first
  PlanCacheStats stats_;
};

// Runs a Model with any input shapes; one call at a time (use one session per thread).
class ModelSession {
 public:
  explicit ModelSession(std::shared_ptr<Model> m);
  std::map<std::string, HostTensor> run(const std::map<std::string, HostTensor>& inputs, Profiler* profiler = nullptr);
  // Any model, sequence and optional inputs and outputs included (ModelValue); run() takes and returns
  // tensors only, and says so for a model with a sequence or optional output.
  std::map<std::string, ModelValue> run_values(const std::map<std::string, ModelValue>& inputs,
                                               Profiler* profiler = nullptr);
  // As run, some inputs being device tensors read in place (a staged plan's rest reads the first part's
  // buffers so: no copy, no host round trip).
  std::map<std::string, HostTensor> run(const std::map<std::string, HostTensor>& inputs,
                                        const std::map<std::string, Tensor>& device_inputs,
                                        Profiler* profiler = nullptr);
  // As run with device inputs, the outputs left on the device (the C API's path for staged plans): only
  // what a stage decides on comes back to the host; `outputs` gets each model output as a device tensor of
  // its real shape, valid until this session's next call.
  void run_on_device(const std::map<std::string, HostTensor>& inputs,
                     const std::map<std::string, Tensor>& device_inputs, std::map<std::string, Tensor>& outputs);
  // The plan and Session of a signature (planned when new); they stay valid until the model evicts the
  // plan and a later call of this session drops them.
  Session& session_for(const Signature& sig);
  // The plan of the last run (null before the first).
  const CompiledModel* last_plan() const { return last_ ? &last_->model() : nullptr; }
  Session* last_session() { return last_; }
  // The plan Sessions this session holds, most recent first.
  std::vector<const Session*> sessions() const;
  Model& model() { return *model_; }

 private:
  void prune();  // drops sessions of plans the model evicted
  // Tensor inputs (host, or device tensors read in place), any outputs: a staged plan's rest runs so, its
  // sequence and optional outputs coming back as such. With `on_device`, the outputs stay on the device
  // (run_on_device: filled there) and none is returned.
  std::map<std::string, ModelValue> run_tensors(const std::map<std::string, HostTensor>& inputs,
                                                const std::map<std::string, Tensor>& device_inputs, Profiler* profiler,
                                                std::map<std::string, Tensor>* on_device);
  // Runs the plan Session `s` of `sig` (inputs by the plan's names: a sequence input's tensors as name[k]),
  // and a staged plan's rest after it; the model's outputs as values (or on the device, as above).
  std::map<std::string, ModelValue> run_plan(Session& s, const Signature& sig,
                                             const std::map<std::string, HostTensor>& inputs,
                                             const std::map<std::string, Tensor>& device_inputs, Profiler* profiler,
                                             std::map<std::string, Tensor>* on_device);
  std::shared_ptr<Model> model_;
  std::list<std::unique_ptr<Session>> sessions_;  // most recent first
  std::map<const Session*, std::unique_ptr<ModelSession>> rest_;  // staged plans: the rest's session
  Session* last_ = nullptr;
};

// A model runs decisions that need run-time data (an If on a computed condition, a while Loop, a Reshape
// to a computed shape) as a staged plan: the plan of the nodes before the decision, whose outputs are read
// back to the host, then the rest, a Model of its own whose signature includes the deciding value.

// import + Model::create.
std::shared_ptr<Model> load_model(std::shared_ptr<Context> ctx, const std::string& path, const ModelOptions& opts = {});
// The plan of a fixed-shape load: import, Model::create with opts.prepare.dims fixing every symbolic
// dim; errors when some input dim stays symbolic.
std::shared_ptr<CompiledModel> load_onnx_model(std::shared_ptr<Context> ctx, const std::string& path,
                                               const LoadOptions& opts = {});

}  // namespace cldl::graph
