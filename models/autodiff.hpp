// Reverse-mode differentiation over the graph IR (build_backward: a backward rule per op), and the ONNX Gradient
// op (ai.onnx.preview.training 1) on it.
//
// A Gradient node names a forward subgraph by value names: xs (the differentiated inputs), zs (the other
// inputs) and y. Its inputs are the values at which it differentiates (the i-th stands for the i-th name of xs
// followed by zs) and its i-th output is dy / dxs[i]. The seed dy is ones of y's shape, so for a y that is not a
// scalar a gradient is that of the sum of y's elements.
//
// Two steps, as for control flow (control_flow.hpp). At load (prepare_gradients, from prepare_structure before
// dead-node removal) each Gradient node gets its forward subgraph: the nodes from xs to y that depend on xs,
// copied into its attribute "_cldl_forward" (first cloned in the graph on fresh names where an input of the node
// is not the value xs / zs names there, so that they compute on the node's inputs), and every value those nodes
// read or write as an extra input, which keeps them alive, before the node, and out of the fusion passes. An op
// on that path without a backward rule is an error then. When planning, inference reaches the node with every
// shape known, and the control-flow expander replaces it by its backward nodes (expand_gradient): ordinary
// device ops of kFusedDomain (the newest opset whatever the model's), so no host fallback.
#pragma once
#include <string>
#include <vector>

#include "models/graph.hpp"

namespace cldl::graph {

// The backward of `forward` (nodes in topological order; those that read, directly or not, a value of `wrt`
// are differentiated, so each must have a backward rule): nodes computing the gradient of sum(dy * y) with
// respect to each value of `wrt`, given `dy`, a value of y's shape and dtype that the caller computes (it may be
// produced by one of the caller's nodes not inferred yet). Every value the forward nodes read or write must
// have its static shape in g.values (when planning). A value read by several nodes sums its gradients; a value of
// `wrt` that y does not depend on gets zeros. Names of the new nodes and values start with `base`.
struct Backward {
  std::vector<Node> nodes;
  std::vector<std::string> grads;  // one per value of wrt
};
Backward build_backward(Graph& g, const std::vector<Node>& forward, const std::string& y, const std::string& dy,
                        const std::vector<std::string>& wrt, const std::string& base);

// The ops with a backward rule (ai.onnx), sorted; the ops whose outputs carry no gradient (Shape, Size).
const std::vector<std::string>& differentiable_ops();
bool has_backward_rule(const Node& n);

// Conv nodes whose weights or bias are not constants (a training graph's weights are inputs updated in place)
// become ConvDynamic (kFusedDomain; a direct kernel that reads them at run time: Conv re-lays its weights out at
// load and needs them then). Returns how many.
size_t make_conv_weights_dynamic(Graph& g);

// LSTM / GRU nodes whose W, R or B are not constants become LSTMTrain / GRUTrain (kFusedDomain; they read their
// weights at run time and save the states the backward needs as one more output, see models/ops_rnn_backward.cpp).
// A sequence_lens input must be a constant of full lengths (it is dropped) or this fails naming the node.
// Returns how many.
size_t make_rnn_weights_dynamic(Graph& g);

bool is_gradient(const Node& n);  // Gradient of ai.onnx.preview.training
// Load (g sorted): every Gradient node of g gets its forward subgraph (see above); returns how many. Errors name the
// Gradient node and, for an op without a backward rule, that node and its op.
size_t prepare_gradients(Graph& g);
// Planning: the nodes replacing a Gradient node that prepare_gradients prepared.
std::vector<Node> expand_gradient(Graph& g, const Node& n);

}  // namespace cldl::graph
