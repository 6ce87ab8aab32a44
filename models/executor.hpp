// Executor: a CompiledModel holds a prepared graph lowered for one or more devices of its context (node
// kernels, constants on the devices that read them, queue assignment, memory plan); Sessions run it.
// Each node is enqueued with its inputs' events (and those of earlier readers of the bytes it reuses) as
// its wait list; independent branches go to different in-order queues; the host waits only for the
// outputs. Sessions of one model may run from different threads at once.
//
// Cross-device placement (CompileOptions::placement): every node runs on one device of the context,
// its kernel built for that device and enqueued on that device's queues. All devices of a Context share
// one cl_context, so events from any device's queue can stand in any other's wait list, and a buffer
// can be read by any device. The plan keeps that sound:
// - each device has its own arena; a value read on a device other than its producer's is given its own
//   buffer (MemoryPlan::Slot::dedicated), never arena bytes, because OpenCL leaves a buffer in use by
//   two devices at once (one writing) undefined and migrates whole buffers, not ranges;
// - before the first reader on another device, that buffer (or a graph input, which lives on
//   CompileOptions::device) is moved there with clEnqueueMigrateMemObjects on the reader's queue, after
//   the producer's event; readers on that device wait for the migration (a profiled run records it as
//   "<value>/migrate to device D"). Runtimes that share host memory (PoCL's CPU devices) make it cheap;
//   GPUs copy. A dedicated buffer is written once per run and only read after that, so runs that follow
//   each other (a session waits for its previous run) never race on it;
// - constants are uploaded once for every device that reads them.
#pragma once
#include <map>
#include <memory>
#include <functional>
#include <mutex>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "models/graph.hpp"
#include "models/memory_plan.hpp"
#include "models/op_registry.hpp"
#include "models/passes.hpp"
#include "runtime/context.hpp"
#include "runtime/profiler.hpp"

namespace cldl::graph {

// Device copies of a model's initializers, shared by the plans of one Model (models/model.hpp): keyed by
// the host bytes (HostTensor::storage_id) and the device. Only the bytes allow()ed (the model's own
// initializers) are kept; a plan's own constants (folded shape values) are uploaded per plan. Thread-safe.
class ConstantCache {
 public:
  void allow(const HostTensor& t);
  // The device copy of `t` (uploaded on first use) when its bytes are allowed; an invalid Tensor otherwise.
  Tensor find_or_upload(Context& ctx, const HostTensor& t, int device);
  // A tensor an op derives from an allowed constant once for all plans (a transposed weight): `kind`
  // names the derivation, `make` computes it on first use. Not allowed: `make`'s result, uploaded for
  // the caller alone.
  Tensor derived(Context& ctx, const HostTensor& from, const std::string& kind, int device,
                 const std::function<HostTensor()>& make);

 private:
  std::mutex mu_;
  std::map<const void*, HostTensor> allowed_;  // keeps the bytes (and so their id) alive
  std::map<std::pair<const void*, int>, Tensor> device_;
  std::map<std::tuple<const void*, std::string, int>, Tensor> derived_;
};

struct CompileOptions {
  int device = 0;
  // Most in-order queues that independent branches spread over, per device; 0: one on a CPU device, two on
  // others (queues_for). On PoCL's CPU device a second queue made every model of the set as fast or slower
  // (two queues against one, paired: ShuffleNet v2 1.22x the latency, GoogLeNet 1.15x, MobileNet v2 1.07x,
  // ResNet-18 1.06x, the others within the noise): its kernels already fill the cores, and the events
  // between the queues cost.
  int queues = 0;
  bool profiling = false;  // profiling queues, so Session::run can record every command
  // RNN/LSTM/GRU nodes: "auto", "sequential", "time", "layer", "data" or "wave" (layers/rnn.hpp RnnStrategy).
  std::string rnn_strategy = "auto";
  // Explicit placement: (pattern, device index) rules, see resolve_placement. Nodes that no rule
  // matches run on the device their attribute _cldl_device names (set by passes, e.g. a training graph's
  // recurrent layers over devices), else on `device`.
  std::vector<std::pair<std::string, int>> placement = {};
  // Set by Model: initializers shared with the model's other plans are uploaded once.
  std::shared_ptr<ConstantCache> constants = {};
};

// The device of every node of `g` under opts.placement. A pattern is a node name, a glob over node
// names ('*' any run, '?' one character), or "op:TYPE" (every node of that op type); when several rules
// match a node the last one wins. A rule that matches no node, or names a device the context lacks
// (`device_count`), is an error naming the rule. Node names are those after the graph passes
// (`cldl run --stats` lists them).
std::vector<int> resolve_placement(const Graph& g, const CompileOptions& opts, size_t device_count);
// The in-order queues a device's independent branches spread over: opts.queues, or where it is 0 one on a
// CPU device and two on others.
int queues_for(const CompileOptions& opts, const DeviceInfo& info);
// "PATTERN=DEV" (the CLI's --place) as a rule; errors name the text.
std::pair<std::string, int> parse_placement_rule(const std::string& text);

class Session;

class CompiledModel : public std::enable_shared_from_this<CompiledModel> {
 public:
  // `g` must be prepared (passes.hpp). Builds every node's kernel and uploads the constants it reads.
  static std::shared_ptr<CompiledModel> compile(std::shared_ptr<Context> ctx, Graph g, const CompileOptions& opts = {});
  std::unique_ptr<Session> session();

  const Graph& graph() const { return graph_; }
  const MemoryPlan& plan() const { return plan_; }
  Context& context() { return *ctx_; }
  const CompileOptions& options() const { return opts_; }
  // One line per node: name, op, device, queue, algorithm (for --stats / debugging).
  std::vector<std::string> describe() const;
  // Device index of each node of graph() (resolve_placement).
  const std::vector<int>& node_devices() const { return node_device_; }
  // What the shape-dependent passes did to make this plan (Model sets it; for --stats).
  PassStats passes;
  // A staged plan (Model, models/model.hpp): this plan is the part before a decision that needs run-time
  // data; `rest` (a Model of the remaining nodes, that value among its shape-deciding inputs) runs after
  // it with this plan's outputs `rest_inputs` and the graph inputs it reads; `rest_reason` is the decision.
  std::shared_ptr<class Model> rest;
  std::string rest_reason;
  // A counted boundary (PlanBoundary::counted): outputs of this plan whose real shape is their count's
  // value; the run reads only the counts back and hands the rest views of the first elements.
  std::vector<CountedValue> counted;
  // Whether this plan is the first part of a staged one (a run goes through ModelSession::run).
  bool staged() const { return rest != nullptr || !counted.empty(); }

  // Internal to the executor.
  enum class Kind { input, constant, planned, view };
  struct Slot {
    Kind kind;
    std::string name;
    Shape shape;
    DType dtype;
    int root = -1;      // views: slot whose bytes they use
    size_t offset = 0;  // planned: arena offset; views: byte offset in their root (in-place Slice / Split)
    int producer = -1;  // step that writes it (-1: input / constant)
    int device = 0;     // where its bytes live (views: their root's)
    bool dedicated = false;  // planned, but in a buffer of its own: read on another device
  };
  struct Step {
    size_t node;
    std::unique_ptr<NodeKernel> kernel;  // null for views
    int device = 0;
    int queue = 0;  // on `device`
    std::vector<int> in, out;  // slot per input / output (-1: absent)
    std::vector<int> waits;    // steps to wait for besides the producers of `in`
  };

 private:
  friend class Session;
  std::shared_ptr<Context> ctx_;
  Graph graph_;
  CompileOptions opts_;
  MemoryPlan plan_;
  std::vector<Slot> slots_;
  std::map<std::string, int> slot_of_;
  std::vector<Step> steps_;
  std::map<int, Tensor> constants_;  // slot -> device tensor
  std::map<std::pair<std::string, int>, int> constant_slot_;  // (initializer, device) -> slot
  std::vector<int> node_device_;
  // Which steps signal an event in a run without a profiler (event elision, computed once by compile():
  // it depends on the steps, their queues and the slots alone): those a command of another queue waits
  // for, those whose bytes the run reads or copies out afterwards, and the last of each queue.
  std::vector<char> signals_;
  void plan_signals();
};

class Session {
 public:
  explicit Session(std::shared_ptr<CompiledModel> m);
  // Copies inputs to the device, runs every node, copies the outputs back; returns when they are on
  // the host. Errors name an input that is missing, unknown, or of the wrong dtype / shape.
  std::map<std::string, HostTensor> run(const std::map<std::string, HostTensor>& inputs, Profiler* profiler = nullptr);
  // As run, with inputs given as device tensors (read in place: an earlier stage's buffers, ready before
  // the call) besides host ones, and only the outputs named in `read` copied back (all when null); the
  // others stay in device_tensor(name) until the next run.
  std::map<std::string, HostTensor> run(const std::map<std::string, HostTensor>& inputs,
                                        const std::map<std::string, Tensor>& device_inputs,
                                        const std::set<std::string>* read, Profiler* profiler = nullptr);
  const CompiledModel& model() const { return *model_; }
  // Unique per Session of the process (never reused, unlike addresses).
  uint64_t serial() const { return serial_; }

  // Device-side use (session_device.cpp), for apps that keep data on the device. The app's buffers as
  // inputs (read in place) and outputs (written in place, or copied there at the end of a run when no
  // kernel of the run produces the output); an invalid tensor unbinds. Dtype and shape must match.
  void bind_input(const std::string& name, const Tensor& t);
  void bind_output(const std::string& name, const Tensor& t);
  // Blocking host -> device copy into an input; waits for the previous run first.
  void write_input(const std::string& name, const HostTensor& h);
  // Enqueues a run whose first commands wait for `waits` and for the previous run; returns an event
  // (on queue 0) that completes when every output is written. Does not wait.
  cl::Event enqueue(const std::vector<cl::Event>& waits = {}, Profiler* profiler = nullptr);
  const cl::Event& last_run() const { return last_run_; }
  // Output of the last run on the host (waits for it).
  HostTensor read_output(const std::string& name);
  // Device tensor of an input or output (a bound buffer when bound).
  Tensor device_tensor(const std::string& name) const;

 private:
  // Enqueues every step: inputs are ready after slot_ready[slot]; steps with nothing else to wait for
  // wait for `start`. Fills slot_ready for outputs; returns each queue's last event (every device).
  std::vector<cl::Event> enqueue_steps(std::vector<cl::Event>& slot_ready, Profiler* profiler, const cl::Event& start);
  int io_slot(const std::string& name, bool input) const;
  void set_slot_tensor(int slot, const Tensor& t);  // and the views over it
  Tensor planned_tensor(int slot) const;  // the bytes the plan gave a planned slot (arena or own buffer)
  // In-order queue `q` of device `d` (the model's profiling setting).
  cl::CommandQueue queue(int d, int q) const;

  std::shared_ptr<CompiledModel> model_;
  uint64_t serial_ = 0;
  std::vector<Tensor> arenas_;  // per device index (invalid where the device has no planned bytes)
  std::map<int, Tensor> dedicated_;  // planned slot read on another device -> its own buffer
  std::vector<Tensor> tensors_;  // per slot
  std::map<int, Tensor> output_copies_;  // output slot -> app buffer it is copied to after each run
  std::map<int, cl::Event> input_ready_;  // input slot -> its last write_input
  std::map<int, Tensor> lent_;  // input slot reading a device tensor of run()'s -> its own buffer
  cl::Event last_run_;
};

}  // namespace cldl::graph
