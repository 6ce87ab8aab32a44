// C++ builder API: builds a graph that reads like the model, e.g.
//   GraphBuilder b("mlp");
//   auto x = b.input("x", DType::f32, {8, 784});
//   auto h = b.relu(b.dense(x, w1, b1));
//   b.output(b.dense(h, w2, b2), "logits");
//   Graph g = b.build();
// Any ONNX op can be added with op(); the named helpers cover the common layers.
#pragma once
#include <string>
#include <vector>

#include "models/graph.hpp"

namespace cldl::graph {

class GraphBuilder;

// A value of the graph under construction (a name plus its builder).
struct Value {
  GraphBuilder* b = nullptr;
  std::string name;
};

class GraphBuilder {
 public:
  explicit GraphBuilder(std::string name = "graph", int64_t opset = 17);

  Value input(const std::string& name, DType t, Shape s);
  Value input(const std::string& name, DType t, ValueShape s);
  Value constant(const std::string& name, HostTensor t);  // an initializer
  void output(Value v, const std::string& rename = {});    // rename adds an Identity

  // Generic node: returns its outputs (`outputs` names, default one output named after the node).
  std::vector<Value> op(const std::string& type, std::vector<Value> inputs, std::map<std::string, AttrValue> attrs = {},
                        int outputs = 1, const std::string& domain = {});
  Value op1(const std::string& type, std::vector<Value> inputs, std::map<std::string, AttrValue> attrs = {});

  // Layers.
  Value dense(Value x, Value w, Value bias = {});  // Gemm with W stored [out, in] (transB = 1)
  Value gemm(Value a, Value b, Value c = {}, float alpha = 1, float beta = 1, bool trans_a = false, bool trans_b = false);
  Value matmul(Value a, Value b);
  Value conv(Value x, Value w, Value bias = {}, std::vector<int64_t> strides = {1, 1}, std::vector<int64_t> pads = {0, 0, 0, 0});
  Value relu(Value x) { return op1("Relu", {x}); }
  Value add(Value a, Value b) { return op1("Add", {a, b}); }
  Value max_pool(Value x, std::vector<int64_t> kernel, std::vector<int64_t> strides);
  Value reshape(Value x, std::vector<int64_t> shape);
  Value flatten(Value x, int64_t axis = 1);
  Value softmax(Value x, int64_t axis = -1) { return op1("Softmax", {x}, {{"axis", axis}}); }

  Graph build();  // sorts and checks the graph
  Graph& graph() { return g_; }

 private:
  Graph g_;
  int counter_ = 0;
};

}  // namespace cldl::graph
