// Op registry: ONNX op type (+ domain, the opset range it implements) -> shape inference / host folding
// and a factory that builds the device implementation. Each op family registers its ops from its own
// models/ops_<family>.cpp with a static OpRegistration, so adding a family touches no other file.
//
// Adding an op (see ops_gemm.cpp for a complete one):
//   void infer_relu(InferCtx& c) { c.set(0, c.input(0).dtype, c.shape(0)); }   // validate + output shape
//   std::unique_ptr<NodeKernel> lower_relu(LowerCtx& c) { ... ElementwiseOp::create(c.ctx, c.device, cfg) ... }
//   const OpRegistration kOps{{.type = "Relu", .since = 6, .family = "elementwise",
//                              .infer = infer_relu, .lower = lower_relu}};
// Versions: one OpDef per op serves the opsets [since, until]. Where a version in that range differs
// (an attribute a later opset moved to an input, Softmax's 2-D coercion before 13...), infer reads
// c.opset and lower reads c.node.opset; a model whose opset is outside the range fails at load naming
// the op, the opset and the range (check_opset).
// Inputs listed in const_inputs must be known at load (initializer, Constant, folded or bound); infer reads
// them with c.constant(i). An infer may fold outputs on the host (c.fold) when they are fully known.
// Node attributes follow the ONNX defaults through node.attr_i / attr_f / attr_ints(name, default).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/minifloat.hpp"

#include "layers/op.hpp"
#include "models/graph.hpp"

namespace cldl::graph {

struct CompileOptions;

// The extra output holding the run-time extent of a counted output (InferCtx::counted): i64 [1].
inline std::string counted_output_name(const std::string& value) { return value + "#count"; }

// What an op's shape inference sees at load time. Errors name the node and op.
struct InferCtx {
  const Node& node;
  int64_t opset = 0;
  std::vector<const ValueInfo*> in;      // null for left-out optional inputs
  std::vector<const HostTensor*> value;  // constant inputs' values (null when not constant)
  std::vector<ValueInfo> out;            // names preset; infer sets dtype and shape
  std::vector<std::optional<HostTensor>> folded;  // outputs computed on the host at load
  // Outputs whose extent along one axis is decided by run-time data (NonZero, NonMaxSuppression on
  // inputs not known when planning): output -> that axis. Their shape here is the upper bound; the
  // kernel writes the real shape's elements (row-major) at the start of that buffer and the extent (i64
  // [1]) to one more output, named counted_output_name(), which the node gets after its own.
  std::map<size_t, size_t> counted = {};

  bool has_input(size_t i) const { return i < in.size() && in[i] != nullptr; }
  const ValueInfo& input(size_t i) const;
  // A static input shape (errors when symbolic / unknown).
  Shape shape(size_t i) const;
  // The value of an input that must be known at load (shape arguments, axes...).
  const HostTensor& constant(size_t i, const char* what) const;
  bool all_constant() const;
  void set(size_t i, DType t, ValueShape s);
  void fold(size_t i, HostTensor t);  // also sets dtype/shape
  // Output i is `bound` at most, its extent along `axis` decided by the data (see `counted`).
  void set_counted(size_t i, DType t, Shape bound, size_t axis) {
    set(i, t, std::move(bound));
    counted[i] = axis;
  }
  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    fail("{}: {}", node.describe(), fmt::format(f, std::forward<Args>(args)...));
  }
};

// A node's device implementation, built once per compiled model and shared by its sessions
// (so enqueue must be thread-safe; cldl ops lock their launch mutex).
class NodeKernel {
 public:
  virtual ~NodeKernel() = default;
  virtual std::string algorithm() const = 0;
  virtual void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, ExecutionContext& ec) = 0;
};

// What a factory sees when the model is compiled for a device: static shapes by then.
struct LowerCtx {
  Context& ctx;
  int device = 0;
  const Node& node;
  std::vector<ValueInfo> in, out;           // in[i].name empty for absent inputs
  std::vector<const HostTensor*> value;     // constant inputs (also uploaded as tensors)
  const CompileOptions* options = nullptr;  // the model's compile options (strategies, ...)
  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    fail("{}: {}", node.describe(), fmt::format(f, std::forward<Args>(args)...));
  }
};

// The newest ai.onnx opset cldl knows (ONNX 1.23); fusion-made nodes (kFusedDomain) follow it.
inline constexpr int64_t kLatestOpset = 28;

struct OpDef {
  std::string type = {};
  std::string domain = {};  // "" = ai.onnx
  int64_t since = 13;  // first opset whose semantics this implementation follows
  int64_t until = 0;   // last one; 0 = every later opset too (the op has not changed since)
  std::string family = {};  // "gemm", "view", "shape", ... (reporting, tolerances)
  std::vector<size_t> const_inputs = {};  // inputs that must be known at load (shapes, axes)
  std::function<void(InferCtx&)> infer = {};
  // Device implementation; empty = host-only op that must fold at load.
  std::function<std::unique_ptr<NodeKernel>(LowerCtx&)> lower = {};
  int view_of = -1;  // >= 0: output 0 is a view (same bytes) of this input; no kernel runs
  // When an input of const_inputs is not known when planning: nodes computing the same with device ops
  // (Compress: a NonZero of the condition, a counted output, then a Gather), which replace the node where
  // inference reaches it. Empty: such an input ends a staged plan by value, or is an error.
  std::function<std::vector<Node>(Graph&, const Node&)> expand_runtime = {};

  bool implements(int64_t opset) const { return opset >= since && (until == 0 || opset <= until); }
  std::string opset_range() const;  // "opsets 7 to 12", "opsets 13 and later"
};

void register_op(OpDef def);
const OpDef* find_op(const std::string& type, const std::string& domain);
// The opset node `n` follows in graph `g` (the newest for fusion-made nodes), and the check that `def`
// implements it: otherwise an error naming the node, the op, the opset and the range cldl implements.
int64_t node_opset(const Graph& g, const Node& n);
void check_opset(const OpDef& def, const Node& n, int64_t opset);
std::vector<const OpDef*> registered_ops();

struct OpRegistration {
  explicit OpRegistration(std::initializer_list<OpDef> defs) {
    for (auto& d : defs) register_op(d);
  }
};

// Host evaluation of an op whose inputs are all constant (shape subgraphs: Shape -> Gather -> Concat ->
// Reshape...). Used at load when the op has no OpDef, or its OpDef does not fold by itself.
using HostFold = std::function<std::vector<HostTensor>(const InferCtx&)>;
void register_folder(const std::string& type, HostFold f);
const HostFold* find_folder(const std::string& type, const std::string& domain);
struct FolderRegistration {
  FolderRegistration(std::initializer_list<std::pair<const char*, HostFold>> fs) {
    for (auto& [t, f] : fs) register_folder(t, f);
  }
};

// Host tensor helpers for folding.
std::vector<int64_t> to_ints(const HostTensor& t);
std::vector<double> to_doubles(const HostTensor& t);
HostTensor from_doubles(DType t, Shape s, const std::vector<double>& v);
HostTensor from_ints(Shape s, const std::vector<int64_t>& v);  // i64
// ONNX Cast on the host, element for element what the device kernel (kernels/elementwise.cl cast_any)
// computes: load-time folding and the reference of the tests. Float to integer out of the int64 range
// (and NaN) gives INT64_MIN before wrapping, as x86 does (ONNX leaves it undefined).
HostTensor cast_host(const HostTensor& x, DType to, bool saturate = true, E8M0Rounding rounding = E8M0Rounding::up);
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
// Element count of `s`, or -1 when it overflows or exceeds `limit` (no allocation is attempted then).
int64_t bounded_numel(const std::vector<int64_t>& dims, int64_t limit);
// Host folding makes tensors of at most this many elements; a bigger one (a corrupted or hostile
// ConstantOfShape / Range) is an error naming the node, never an out-of-memory.
constexpr int64_t kMaxHostFoldElements = int64_t(1) << 25;
int64_t check_host_fold_size(const InferCtx& c, const std::vector<int64_t>& dims);
// Normalises a possibly negative axis against a rank; errors name the node.
int64_t norm_axis(const InferCtx& c, int64_t axis, int64_t rank);

}  // namespace cldl::graph
