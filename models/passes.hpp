// Graph passes run at load: binding inputs / symbolic dims, topological sort, shape inference with
// constant folding (shape subgraphs run on the host), dead-node removal; and the hooks for the fusion
// passes that need the conv / norm / activation ops (BatchNorm folding, activation fusion).
#pragma once
#include <functional>
#include <map>
#include <string>
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

struct PassStats {
  size_t folded_nodes = 0, removed_dead = 0, fused = 0;
};

// Runs everything a graph needs before it can be compiled; errors name the node / value at fault.
PassStats prepare(Graph& g, const PrepareOptions& opts = {});

// Shape inference over the sorted graph; folds nodes whose outputs are known on the host.
size_t infer_shapes(Graph& g, bool fold);
// Removes nodes none of whose outputs reach a graph output. Returns how many.
size_t remove_dead_nodes(Graph& g);
// Graph inputs that some node needs as a load-time constant (Reshape's shape, a host-only op...): a
// caller with values for them (conformance data, a fixed shape) binds them through PrepareOptions::bind.
std::vector<std::string> load_time_inputs(const Graph& g);

// A rewrite pass that runs before inference, on structure and initializers (BatchNorm folding into Conv/Gemm, activation fusion into
// GEMM/conv epilogues). Families register theirs; prepare() runs them in registration order.
using FusionPass = std::function<size_t(Graph&)>;
void register_fusion_pass(std::string name, FusionPass p);
size_t run_fusion_passes(Graph& g);  // all registered passes; returns the number of rewrites

// The activation a fusion pass folded into a Gemm / MatMul node (Act::none when none).
Activation fused_activation(const Node& n);

}  // namespace cldl::graph
