// Graph passes run at load: binding inputs / symbolic dims, topological sort, shape inference with
// constant folding (shape subgraphs run on the host), dead-node removal; and the hooks for the fusion
// passes that need the conv / norm / activation ops (BatchNorm folding, activation fusion).
#pragma once
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "layers/activation.hpp"
#include "models/graph.hpp"

namespace cldl::graph {

struct PrepareOptions {
  // Graph inputs whose values are fixed at load (turned into initializers), e.g. shape tensors.
  std::map<std::string, HostTensor> bind;
  // Values for symbolic input dimensions ("batch" -> 8).
  std::map<std::string, int64_t> dims;
  bool fold_constants = true;
};

struct PlanBoundary;

struct PassStats {
  size_t folded_nodes = 0, removed_dead = 0, fused = 0;
};

// Runs everything a graph needs before it can be compiled; errors name the node / value at fault.
// prepare = bind_inputs (every dim required) + prepare_structure + prepare_shapes.
PassStats prepare(Graph& g, const PrepareOptions& opts = {});
// The parts of prepare. bind_inputs turns opts.bind into initializers and fixes the symbolic input dims
// that opts.dims names (with `require_static`, one it does not name is an error). prepare_structure is
// what needs no shapes (a Model runs it once at load): sort, dead-node removal, the structure fusion
// passes, and check_supported. prepare_shapes is what needs static input shapes (a plan runs it once per
// signature): shape inference with folding, the typed fusion passes, dead-node removal.
void bind_inputs(Graph& g, const PrepareOptions& opts, bool require_static);
PassStats prepare_structure(Graph& g);
PassStats prepare_shapes(Graph& g, bool fold, PlanBoundary* boundary = nullptr);
// Every node has an implementation (device op or host folder) for the model's opset; errors name the
// node, the op and the opset.
void check_supported(const Graph& g);
// Graph inputs whose values decide shapes (they reach an argument that must be known at plan time, e.g.
// Reshape's shape, through nodes other than Shape / Size): integer and bool inputs only. A Model plans
// once per distinct value of these (they are part of its signature) and binds them as constants.
std::vector<std::string> shape_deciding_inputs(const Graph& g);

// An output whose extent along `axis` is decided by run-time data (InferCtx::counted): its buffer has the
// `bound` shape, the real one is `bound` with `count`'s value (i64 [1], on the device) along `axis`.
struct CountedValue {
  std::string value, count;
  Shape bound;
  size_t axis = 0;
  Shape real(int64_t n) const {
    Shape s = bound;
    s.dims[axis] = n;
    return s;
  }
};

// Where planning stops at a decision that needs a value computed from run-time data (a staged plan,
// models/model.cpp): an If's or a Loop's condition, a Loop's trip count, or an argument that must be
// known (Reshape's shape...) of at most kMaxDecidingElements elements (`value`, read back to the host);
// or just after an op whose output shape is decided by its data (NonZero, NonMaxSuppression: `counted`,
// whose counts alone are read back; the rest is planned per count, the outputs stay on the device).
struct PlanBoundary {
  bool hit = false;
  std::string value;       // the value the decision needs (empty for a counted boundary)
  std::string reason;      // what the error would say without staging
  std::vector<Node> rest;  // the nodes from the deciding one on (after the counted op), in order
  std::vector<CountedValue> counted;
};
inline constexpr int64_t kMaxDecidingElements = 4096;

// Shape inference over the sorted graph; folds nodes whose outputs are known on the host. With
// `boundary`, a decision that needs run-time data stops it there: g keeps the nodes before it (inferred),
// `boundary` gets the rest, and graph outputs are not checked.
size_t infer_shapes(Graph& g, bool fold, PlanBoundary* boundary = nullptr);
// Folds, once, what every plan would fold the same way whatever the input shapes: the nodes that read
// only constants (Constant nodes, arithmetic on initializers), through the same inference as a plan's
// (infer_shapes on them alone). Their outputs become initializers; a node that would not fold (a device op,
// a fill too large for the host, an error) stays for the plans. A Model runs it at load. Returns how many.
size_t fold_constants_at_load(Graph& g);
// Removes nodes none of whose outputs reach a graph output. Returns how many.
size_t remove_dead_nodes(Graph& g);
// Graph inputs that some node needs as a load-time constant (Reshape's shape, a host-only op...): a
// caller with values for them (conformance data, a fixed shape) binds them through PrepareOptions::bind.
std::vector<std::string> load_time_inputs(const Graph& g);

// A rewrite pass that runs before inference, on structure and initializers (BatchNorm folding into Conv/Gemm, activation fusion into
// GEMM/conv epilogues). Families register theirs; prepare() runs them in registration order.
using FusionPass = std::function<size_t(Graph&)>;
// structure: before shape inference (Constant nodes not folded yet). typed: after it, when every value
// has its dtype and static shape in g.values and every constant is an initializer (pattern passes:
// decomposed LayerNorm / GELU / attention). When a typed pass rewrites anything, prepare() runs the
// structure passes again (a new Gelu can join a GEMM epilogue), sorts and infers once more.
// late: once at the end of a plan's passes, on the final typed graph (element-wise fusion); a late pass
// keeps g.values valid for what it leaves (the fused node's outputs keep their names, shapes and dtypes).
enum class FusionStage { structure, typed, late };
void register_fusion_pass(std::string name, FusionPass p, FusionStage stage = FusionStage::structure);
// The registered passes of one stage in registration order; returns the number of rewrites.
size_t run_fusion_passes(Graph& g, FusionStage stage = FusionStage::structure);

// Nodes made by fusion passes for ops whose ONNX version is newer than the model's opset (a fused
// LayerNormalization in an opset-14 model, Gelu, Attention) live in this domain: the registry serves
// them with the ai.onnx op of the same name at the first opset cldl implements.
inline constexpr const char* kFusedDomain = "ai.cldl.fused";
// Int attribute of any node: the context's device it runs on (resolve_placement: a placement rule overrides it).
// Passes that replace nodes keep it (rnn-time-chunks copies it to the chunks; element-wise fusion groups only nodes
// placed alike).
inline constexpr const char* kDeviceAttr = "_cldl_device";
// The device kDeviceAttr names on `n` (-1: none); `to` placed as `from` is (nothing when `from` is not placed).
int64_t placed_device(const Node& n);
void place_like(Node& to, const Node& from);

// Helpers for passes: readers of each value (graph outputs count as reader -1), and removal of the
// nodes at the given indices keeping the order of the rest.
// (Hashed: the passes build it once each, for every plan, and only look names up in it.)
using ValueReaders = std::unordered_map<std::string, std::vector<int>>;
ValueReaders value_readers(const Graph& g);
void erase_nodes(Graph& g, const std::set<size_t>& drop);
// Whether some ai.onnx node of `g` is one of `ops`: a pass whose every match starts at such a node returns
// at once without one, before it indexes the graph (readers, producers). It depends on the op types alone,
// never on shapes, so a plan skips exactly the passes that could not rewrite anything.
bool has_op(const Graph& g, std::initializer_list<std::string_view> ops);

// A residual Add folded into the node producing one of its operands (typed passes): for each default-domain Add
// of two inputs whose operand y is read by that Add alone, is the first output of a node P, and has the static
// f32 shape of the other operand r and of the Add's output (no broadcasting), where r is no initializer and is
// a graph input or produced before P (so the schedule stays as it was), `fold(P, r)` decides: it returns false
// to leave the Add, or rewrites P to add r itself and returns true, and then P writes the Add's output and the
// Add goes. Returns the number of Adds folded.
size_t fold_residual_adds(Graph& g, const std::function<bool(Node& producer, const std::string& r)>& fold);

// The activation a fusion pass folded into a Gemm / MatMul node (Act::none when none).
Activation fused_activation(const Node& n);

}  // namespace cldl::graph
