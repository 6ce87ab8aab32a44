// GraphBuilder: nodes appended in call order, names generated from the op type.
#include "models/builder.hpp"

namespace cldl::graph {

namespace {
HostTensor from_shape_ints(const std::vector<int64_t>& v) {
  return HostTensor::from<int64_t>(Shape{int64_t(v.size())}, std::span<const int64_t>(v));
}
}  // namespace

GraphBuilder::GraphBuilder(std::string name, int64_t opset) {
  g_.name = std::move(name);
  g_.opsets[""] = opset;
}

Value GraphBuilder::input(const std::string& name, DType t, Shape s) { return input(name, t, ValueShape(s)); }

Value GraphBuilder::input(const std::string& name, DType t, ValueShape s) {
  g_.inputs.push_back({name, t, std::move(s)});
  return {this, name};
}

Value GraphBuilder::constant(const std::string& name, HostTensor t) {
  if (g_.initializers.count(name)) fail("GraphBuilder: constant '{}' defined twice", name);
  g_.initializers[name] = std::move(t);
  return {this, name};
}

void GraphBuilder::output(Value v, const std::string& rename) {
  std::string name = v.name;
  if (!rename.empty() && rename != v.name) {  // an Identity gives the output the requested name
    op("Identity", {v});
    g_.nodes.back().outputs[0] = rename;
    name = rename;
  }
  ValueInfo o{name, DType::f32, ValueShape()};
  o.shape.known = false;  // filled by shape inference
  g_.outputs.push_back(std::move(o));
}

std::vector<Value> GraphBuilder::op(const std::string& type, std::vector<Value> inputs,
                                    std::map<std::string, AttrValue> attrs, int outputs, const std::string& domain) {
  Node n;
  n.op_type = type;
  n.domain = domain;
  n.name = fmt::format("{}_{}", type, counter_++);
  for (auto& v : inputs) n.inputs.push_back(v.name);
  std::vector<Value> outs;
  for (int i = 0; i < outputs; ++i) {
    n.outputs.push_back(outputs == 1 ? n.name : fmt::format("{}:{}", n.name, i));
    outs.push_back({this, n.outputs.back()});
  }
  n.attrs = std::move(attrs);
  g_.nodes.push_back(std::move(n));
  return outs;
}

Value GraphBuilder::op1(const std::string& type, std::vector<Value> inputs, std::map<std::string, AttrValue> attrs) {
  return op(type, std::move(inputs), std::move(attrs), 1)[0];
}

Value GraphBuilder::dense(Value x, Value w, Value bias) { return gemm(x, w, bias, 1, 1, false, true); }

Value GraphBuilder::gemm(Value a, Value b, Value c, float alpha, float beta, bool trans_a, bool trans_b) {
  std::vector<Value> in{a, b};
  if (!c.name.empty()) in.push_back(c);
  return op1("Gemm", in, {{"alpha", alpha}, {"beta", beta}, {"transA", int64_t(trans_a)}, {"transB", int64_t(trans_b)}});
}

Value GraphBuilder::matmul(Value a, Value b) { return op1("MatMul", {a, b}); }

Value GraphBuilder::conv(Value x, Value w, Value bias, std::vector<int64_t> strides, std::vector<int64_t> pads) {
  std::vector<Value> in{x, w};
  if (!bias.name.empty()) in.push_back(bias);
  return op1("Conv", in, {{"strides", strides}, {"pads", pads}});
}

Value GraphBuilder::max_pool(Value x, std::vector<int64_t> kernel, std::vector<int64_t> strides) {
  return op1("MaxPool", {x}, {{"kernel_shape", kernel}, {"strides", strides}});
}

Value GraphBuilder::reshape(Value x, std::vector<int64_t> shape) {
  Value s = constant(fmt::format("shape_{}", counter_++), from_shape_ints(shape));
  return op1("Reshape", {x, s});
}

Value GraphBuilder::flatten(Value x, int64_t axis) { return op1("Flatten", {x}, {{"axis", axis}}); }

Graph GraphBuilder::build() {
  Graph g = g_;
  g.sort();
  return g;
}

}  // namespace cldl::graph
