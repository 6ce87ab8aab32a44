// Graph IR: attribute lookups, shapes, topological sort with cycle and dangling-value detection.
#include "models/graph.hpp"

#include <deque>
#include <set>

#include <fmt/format.h>

namespace cldl::graph {

bool ValueShape::is_static() const {
  if (!known) return false;
  for (auto d : dims)
    if (d < 0) return false;
  return true;
}

Shape ValueShape::to_shape() const {
  if (!is_static()) fail("shape {} is not static", str());
  return Shape(dims);
}

std::string ValueShape::str() const {
  if (!known) return "[?]";
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    if (i < symbols.size() && !symbols[i].empty() && dims[i] < 0) s += symbols[i];
    else if (dims[i] < 0) s += "?";
    else s += std::to_string(dims[i]);
  }
  return s + "]";
}

std::string Node::describe() const { return fmt::format("node '{}' ({}{}{})", name, domain, domain.empty() ? "" : ".", op_type); }

size_t Node::input_count() const {
  size_t n = inputs.size();
  while (n > 0 && inputs[n - 1].empty()) --n;
  return n;
}

const std::string& Node::input(size_t i) const {
  static const std::string none;
  return i < inputs.size() ? inputs[i] : none;
}

namespace {
template <typename T>
const T& get_attr(const Node& n, const std::string& a, const char* want) {
  const auto& v = n.attrs.at(a);
  if (auto* p = std::get_if<T>(&v)) return *p;
  fail("{}: attribute '{}' should be {}", n.describe(), a, want);
}
}  // namespace

int64_t Node::attr_i(const std::string& a, int64_t def) const { return has(a) ? get_attr<int64_t>(*this, a, "an int") : def; }
float Node::attr_f(const std::string& a, float def) const {
  if (!has(a)) return def;
  if (auto* i = std::get_if<int64_t>(&attrs.at(a))) return float(*i);
  return get_attr<float>(*this, a, "a float");
}
std::string Node::attr_s(const std::string& a, const std::string& def) const {
  return has(a) ? get_attr<std::string>(*this, a, "a string") : def;
}
std::vector<int64_t> Node::attr_ints(const std::string& a, std::vector<int64_t> def) const {
  return has(a) ? get_attr<std::vector<int64_t>>(*this, a, "a list of ints") : def;
}
const HostTensor* Node::attr_t(const std::string& a) const {
  return has(a) ? &get_attr<HostTensor>(*this, a, "a tensor") : nullptr;
}

const Graph* Node::attr_g(const std::string& a) const {
  return has(a) ? get_attr<SubGraph>(*this, a, "a graph").get() : nullptr;
}

std::vector<std::string> Node::outer_inputs() const {
  std::set<std::string> r;
  for (auto& [k, v] : attrs) {
    const auto* sg = std::get_if<SubGraph>(&v);
    if (!sg || !*sg) continue;
    const Graph& g = **sg;
    std::set<std::string> local;
    for (auto& in : g.inputs) local.insert(in.name);
    for (auto& [name, t] : g.initializers) local.insert(name);
    for (auto& n : g.nodes)
      for (auto& o : n.outputs) local.insert(o);
    auto use = [&](const std::string& v) {
      if (!v.empty() && !local.count(v)) r.insert(v);
    };
    for (auto& n : g.nodes) {
      for (auto& in : n.inputs) use(in);
      for (auto& in : n.outer_inputs()) use(in);
    }
    for (auto& o : g.outputs) use(o.name);
  }
  return {r.begin(), r.end()};
}

int64_t Graph::opset(const std::string& domain) const {
  auto it = opsets.find(domain);
  if (it == opsets.end() && domain.empty()) it = opsets.find("ai.onnx");
  return it == opsets.end() ? 0 : it->second;
}

bool Graph::is_input(const std::string& v) const {
  for (auto& i : inputs)
    if (i.name == v) return true;
  return false;
}

const ValueInfo* Graph::info(const std::string& v) const {
  auto it = values.find(v);
  return it == values.end() ? nullptr : &it->second;
}

std::string Graph::unique_name(const std::string& base) {
  for (;;) {
    std::string n = fmt::format("{}__{}", base, counter_++);
    if (!values.count(n) && !initializers.count(n)) return n;
  }
}

void Graph::sort() {
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].name.empty()) nodes[i].name = fmt::format("{}_{}", nodes[i].op_type, i);
    for (auto& o : nodes[i].outputs) {
      if (o.empty()) continue;
      if (is_input(o) || is_constant(o))
        fail("{}: output '{}' is also a graph input or initializer", nodes[i].describe(), o);
      if (!producer.emplace(o, i).second)
        fail("{}: output '{}' is already produced by {}", nodes[i].describe(), o, nodes[producer[o]].describe());
    }
  }
  // Kahn's algorithm, taking ready nodes in their original order.
  std::vector<int> pending(nodes.size(), 0);
  std::vector<std::vector<size_t>> users(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::set<size_t> deps;
    std::vector<std::string> reads = nodes[i].inputs;
    for (auto& in : nodes[i].outer_inputs()) reads.push_back(in);
    for (auto& in : reads) {
      if (in.empty() || is_input(in) || is_constant(in)) continue;
      auto p = producer.find(in);
      if (p == producer.end())
        fail("{}: input '{}' is neither a graph input, an initializer nor the output of a node", nodes[i].describe(), in);
      deps.insert(p->second);
    }
    pending[i] = int(deps.size());
    for (auto d : deps) users[d].push_back(i);
  }
  std::set<size_t> ready;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!pending[i]) ready.insert(i);
  std::vector<Node> order;
  order.reserve(nodes.size());
  std::vector<bool> done(nodes.size(), false);
  while (!ready.empty()) {
    size_t i = *ready.begin();
    ready.erase(ready.begin());
    done[i] = true;
    order.push_back(std::move(nodes[i]));  // a cycle's error below names only nodes not taken
    for (auto u : users[i])
      if (--pending[u] == 0) ready.insert(u);
  }
  if (order.size() != nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i)
      if (!done[i]) fail("graph '{}' has a cycle through {}", name, nodes[i].describe());
  }
  for (auto& o : outputs)
    if (!producer.count(o.name) && !is_input(o.name) && !is_constant(o.name))
      fail("graph output '{}' is not produced by any node", o.name);
  nodes = std::move(order);
}

std::map<std::string, size_t> Graph::producers() const {
  std::map<std::string, size_t> p;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (auto& o : nodes[i].outputs)
      if (!o.empty()) p[o] = i;
  return p;
}

}  // namespace cldl::graph
