// Control flow (If, Loop, Scan) and sequence values expanded when a plan is made. A plan knows every input shape and the
// values of the inputs that decide shapes, so an If's condition, a Loop's trip count and condition and a
// Scan's length are usually known then: the If becomes its branch, the Loop and the Scan become their
// body repeated (values renamed per iteration, loop-carried values chained, scan outputs stacked with
// Reshape + Concat). infer_shapes (passes.cpp) asks the expander about each node it reaches, so every
// decision sees the values folded before it (a Loop's condition after iteration t is folded before
// iteration t + 1 is expanded). A decision that needs run-time data is an error saying so; reading it
// back from the device mid-run is not built yet.
//
// Sequence values (SequenceEmpty / Construct / Insert / Erase / At / Length, ConcatFromSequence,
// SplitToSequence), which Loop bodies build (a scripted `list.append` in a for, then torch.stack), live only
// while planning: a sequence is the list of its tensors' names, so the ops become Identity, Concat, Reshape
// and Gather nodes on tensors, or nothing at all. SequenceMap expands its body once per element. Optional
// values (Optional, OptionalHasElement, OptionalGetElement) are known when planning too: absent, or the
// tensor / sequence they hold. A model's sequence or optional inputs come in as tensors (Model::make_plan
// builds them with SequenceConstruct / Optional); its sequence or optional outputs go out as the lists of
// tensors unpack_output names.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "models/graph.hpp"
#include "runtime/error.hpp"

namespace cldl::graph {

// The subgraphs of an If / Loop / Scan node (ai.onnx); empty for any other node. Errors name a missing one.
std::vector<const Graph*> control_flow_subgraphs(const Node& n);
// The inputs of a control-flow or sequence node that must be known when planning: If's cond, Loop's M and
// cond, sequence positions and splits.
std::vector<size_t> control_flow_deciding_inputs(const Node& n);
// If, Loop, Scan, the sequence and optional ops, FlexAttention and Gradient (models/autodiff.hpp): nodes the
// expander replaces (they have no device implementation).
bool expanded_when_planning(const Node& n);
bool is_sequence_op(const Node& n);
bool is_optional_op(const Node& n);  // Optional, OptionalHasElement, OptionalGetElement
// FlexAttention (ai.onnx.preview): expanded when planning into device ops with its score_mod / prob_mod
// subgraphs inlined (expand_flex_attention, models/ops_llm.cpp).
bool is_flex_attention(const Node& n);
std::vector<Node> expand_flex_attention(Graph& g, const Node& n);

// Helpers of the expansions: a new initializer of g named after `base`; a node named after `base` (unique in
// g); and `sub`'s nodes for g, its inputs reading the outer values `bind` names, its own values and
// initializers renamed under `prefix` (unique in g), outer-scope names kept (`outs` gets the names of
// sub's outputs in g).
std::string add_constant(Graph& g, const std::string& base, HostTensor t);
Node make_node(Graph& g, const std::string& base, const std::string& op, std::vector<std::string> in,
               std::vector<std::string> out, std::map<std::string, AttrValue> attrs = {});
std::vector<Node> inline_body(Graph& g, const Graph& sub, const std::string& prefix,
                              std::map<std::string, std::string> bind, std::vector<std::string>& outs);

// Thrown while planning where a decision needs a value computed from run-time data (`value`): a plan
// that may stop there (Model's staged plans) catches it; elsewhere it is the error it says.
struct RuntimeDecision : Error {
  RuntimeDecision(const std::string& message, std::string v) : Error(message), value(std::move(v)) {}
  std::string value;
};

// Most iterations one Loop or Scan node expands to (a bound on plan size; an error names it).
inline constexpr int64_t kMaxUnrolledIterations = 4096;

class ControlFlowExpander {
 public:
  // If, Loop, Scan, a sequence op, an Identity of a sequence, FlexAttention, Gradient, or a step marker this
  // expander emitted.
  bool handles(const Node& n) const;
  // The nodes that replace `n` (for a Loop / Scan: one iteration and a step marker, or the final outputs).
  std::vector<Node> expand(Graph& g, const Node& n);
  // A step marker whose Loop stopped at a run-time condition, as a Loop node that runs the remaining
  // iterations (its body reads the iteration number shifted by those done). Scan values of the iterations
  // done travel as its extra last inputs and are stacked before the rest's. Any other node: itself.
  Node remaining_loop(Graph& g, const Node& marker);
  // A graph output that is a sequence or an optional here: its tensors (an absent optional: kind none).
  // False for a tensor.
  bool unpack_output(const std::string& value, Graph::Unpacked& out) const;
  // Nodes that build again, from their tensors, the sequences and optionals among `values` that this
  // expander holds (SequenceConstruct / SequenceEmpty, Optional), for a graph planned apart that reads
  // them: a staged plan's rest (the tensors cross the boundary, the lists are made again when the rest is
  // planned, so each list of element shapes gets a plan of its own), a zero-iteration body's probe.
  // Names it does not hold are skipped.
  std::vector<Node> rebuild(Graph& g, const std::vector<std::string>& values) const;

 private:
  struct Unroll {
    Node node;
    const Graph* body = nullptr;
    bool loop = false;
    int64_t t = 0, trips = -1;  // next iteration; Loop's M or Scan's length (-1: no trip count)
    std::string cond;           // Loop: the condition for the next iteration ("" = true)
    std::vector<std::string> carried;                // loop-carried / state values now
    std::vector<std::vector<std::string>> scans;     // per scan output: each iteration's value
    std::vector<std::string> scan_in;                // Scan: its scan inputs
    std::vector<int64_t> in_axes, in_reverse, out_axes, out_reverse;
  };
  std::vector<Node> step(Graph& g, size_t index);
  // The dtype and shape of one iteration's value of each scan output of a Loop / Scan that runs no
  // iteration (ONNX: such a scan output is empty along its scan axis, its other dims are the body's).
  std::vector<ValueInfo> scan_elements(const Graph& g, const Unroll& u) const;
  std::vector<Node> sequence_op(Graph& g, const Node& n);
  const std::vector<std::string>& sequence(const Node& n, size_t input) const;
  std::vector<Unroll> unrolls_;
  std::vector<Node> optional_op(Graph& g, const Node& n);
  std::vector<Node> sequence_map(Graph& g, const Node& n);
  std::vector<Node> scan8(Graph& g, const Node& n);
  std::map<std::string, std::vector<std::string>> sequences_;  // sequence value -> its tensors' names
  // optional value -> what it holds: "" when absent, else a tensor's or a sequence's (in sequences_) name
  std::map<std::string, std::string> optionals_;
};

}  // namespace cldl::graph
