// Executor: a CompiledModel holds a prepared graph lowered for one device (node kernels, constants on
// the device, queue assignment, memory plan); Sessions run it. Each node is enqueued with its inputs'
// events (and those of earlier readers of the bytes it reuses) as its wait list; independent branches
// go to different in-order queues; the host waits only for the outputs. Sessions of one model may run
// from different threads at once.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/graph.hpp"
#include "models/memory_plan.hpp"
#include "models/op_registry.hpp"
#include "runtime/context.hpp"
#include "runtime/profiler.hpp"

namespace cldl::graph {

struct CompileOptions {
  int device = 0;
  int queues = 2;          // most in-order queues that independent branches spread over
  bool profiling = false;  // profiling queues, so Session::run can record every command
  // RNN/LSTM/GRU nodes: "auto", "sequential", "time", "layer", "data" or "wave" (layers/rnn.hpp RnnStrategy).
  std::string rnn_strategy = "auto";
};

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
  // One line per node: name, op, queue, algorithm (for --stats / debugging).
  std::vector<std::string> describe() const;

  // Internal to the executor.
  enum class Kind { input, constant, planned, view };
  struct Slot {
    Kind kind;
    std::string name;
    Shape shape;
    DType dtype;
    int root = -1;      // views: slot whose bytes they use
    size_t offset = 0;  // planned: arena offset
    int producer = -1;  // step that writes it (-1: input / constant)
  };
  struct Step {
    size_t node;
    std::unique_ptr<NodeKernel> kernel;  // null for views
    int queue = 0;
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
  int queues_used_ = 1;
};

class Session {
 public:
  explicit Session(std::shared_ptr<CompiledModel> m);
  // Copies inputs to the device, runs every node, copies the outputs back; returns when they are on
  // the host. Errors name an input that is missing, unknown, or of the wrong dtype / shape.
  std::map<std::string, HostTensor> run(const std::map<std::string, HostTensor>& inputs, Profiler* profiler = nullptr);
  const CompiledModel& model() const { return *model_; }

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
  // wait for `start`. Fills slot_ready for outputs; returns each queue's last event.
  std::vector<cl::Event> enqueue_steps(std::vector<cl::Event>& slot_ready, Profiler* profiler, const cl::Event& start);
  int io_slot(const std::string& name, bool input) const;
  void set_slot_tensor(int slot, const Tensor& t);  // and the views over it

  std::shared_ptr<CompiledModel> model_;
  Tensor arena_;
  std::vector<Tensor> tensors_;  // per slot
  std::map<int, Tensor> output_copies_;  // output slot -> app buffer it is copied to after each run
  std::map<int, cl::Event> input_ready_;  // input slot -> its last write_input
  cl::Event last_run_;
};

}  // namespace cldl::graph
