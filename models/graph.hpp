// Graph IR: values (name, dtype, shape with possibly symbolic dims), nodes (op type, domain, attributes,
// inputs, outputs), initializers as host tensors. Built by the builder API or the ONNX importer.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "runtime/tensor.hpp"

namespace cldl::graph {

// Shape whose dims may be unknown (-1) or symbolic (a name, value -1 until bound).
struct ValueShape {
  std::vector<int64_t> dims;
  std::vector<std::string> symbols;  // same length as dims; non-empty where the dim is symbolic
  bool known = true;                 // false: not even the rank is known

  ValueShape() = default;
  ValueShape(Shape s) : dims(s.dims), symbols(s.dims.size()) {}  // NOLINT: implicit on purpose
  bool is_static() const;
  Shape to_shape() const;  // throws when not static
  std::string str() const; // "[batch, 3, 224, 224]"
};

struct ValueInfo {
  std::string name;
  DType dtype = DType::f32;
  ValueShape shape;
  bool sequence = false;  // a sequence of tensors of `dtype` (shape unknown; a plan lists its tensors)
  bool optional = false;  // an ONNX optional: of a tensor, or of a sequence with `sequence`; may be absent
  bool composite() const { return sequence || optional; }
};

// A model input or output that a tensor map cannot hold: a sequence of tensors (ONNX sequence type) or an
// absent optional (an optional that holds something is that tensor or sequence).
struct ModelValue {
  enum class Kind { tensor, sequence, none };
  Kind kind = Kind::tensor;
  HostTensor tensor;                 // kind == tensor
  std::vector<HostTensor> items;     // kind == sequence
  static ModelValue of(HostTensor t) { return {Kind::tensor, std::move(t), {}}; }
  static ModelValue sequence_of(std::vector<HostTensor> v) { return {Kind::sequence, {}, std::move(v)}; }
  static ModelValue none() { return {Kind::none, {}, {}}; }
};

class Graph;
// A subgraph attribute (If's branches, Loop's and Scan's bodies): its nodes may read values of the
// enclosing graphs by name (outer scope).
using SubGraph = std::shared_ptr<const Graph>;
using AttrValue = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
                               std::vector<std::string>, HostTensor, SubGraph>;

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;  // "" = ai.onnx
  std::vector<std::string> inputs;   // "" = optional input left out
  std::vector<std::string> outputs;  // "" = optional output not wanted
  std::map<std::string, AttrValue> attrs;
  // The version of its domain's operator set that the node follows (the model's opset import; the newest
  // for fusion-made nodes). Set by shape inference, so lowering can tell versions apart; 0 until then.
  int64_t opset = 0;

  bool has(const std::string& a) const { return attrs.count(a) != 0; }
  // Typed attribute lookups with the ONNX default; a wrong attribute type is an error naming the node.
  int64_t attr_i(const std::string& a, int64_t def) const;
  float attr_f(const std::string& a, float def) const;
  std::string attr_s(const std::string& a, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& a, std::vector<int64_t> def = {}) const;
  const HostTensor* attr_t(const std::string& a) const;
  const Graph* attr_g(const std::string& a) const;  // a subgraph attribute; null when absent
  // Values of enclosing scopes that this node's subgraphs read (recursively): implicit inputs, which
  // order the node after their producers and keep them alive.
  std::vector<std::string> outer_inputs() const;
  std::string describe() const;  // "node 'fc1' (Gemm)"
  size_t input_count() const;    // ignoring trailing left-out inputs
  const std::string& input(size_t i) const;  // "" when absent
};

class Graph {
 public:
  std::string name = "graph";
  std::map<std::string, int64_t> opsets;  // domain ("" = ai.onnx) -> version
  std::map<std::string, std::string> metadata;  // the model's metadata_props (e.g. "max_positions")
  std::vector<ValueInfo> inputs, outputs;
  std::vector<Node> nodes;
  std::map<std::string, HostTensor> initializers;
  std::map<std::string, ValueInfo> values;  // every known value's type and shape (filled by inference)
  // Graph outputs that are not one tensor once a plan is made (shape inference fills it): a sequence
  // output's tensors, in order (each a graph output of its own), or an absent optional (kind none).
  struct Unpacked {
    ModelValue::Kind kind = ModelValue::Kind::sequence;
    std::vector<std::string> items;
  };
  std::map<std::string, Unpacked> unpacked_outputs;

  int64_t opset(const std::string& domain = "") const;
  bool is_constant(const std::string& v) const { return initializers.count(v) != 0; }
  bool is_input(const std::string& v) const;
  const ValueInfo* info(const std::string& v) const;
  // Orders `nodes` topologically (stable). Throws naming a node on a cycle, on a value used but never
  // produced, and on a value produced twice.
  void sort();
  // Name -> index of the node that produces it (after sort()).
  std::map<std::string, size_t> producers() const;
  std::string unique_name(const std::string& base);

 private:
  int64_t counter_ = 0;
};

}  // namespace cldl::graph
