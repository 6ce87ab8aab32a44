// Writes the small ONNX models the C API, interop and Python tests load (built with the C++ builder
// API, so no binary blobs live in git). Usage: cldl_capi_models OUT_DIR
//   mlp.onnx: x f32 [batch, 5] -> y = relu(x W^T + b), W [7, 5], b [7]; x_view = Identity(x).
//   branch.onnx: x f32 [4, 5] -> z = relu(x W^T + b) + x V^T, V = -W / 2: two branches on two queues.
// The weights follow a formula the tests repeat in their own references (tests/capi/mlp_ref.h).
// Models whose plans decide at run time (staged plans, docs/dynamic-shapes.md):
//   nonzero.onnx: x f32 [r, c], w f32 [k] -> nz = NonZero(x) i64 [2, count]; vals = GatherND(x, nz^T) * w
//     f32 [count] (w broadcasts: k is 1 or count).
//   if_data.onnx: x f32 [n] -> positive = sum(x) > 0; y = If(positive, then: Reshape(x, [-1, 2]),
//     else: Reshape(-x, [2, -1])): [n/2, 2] or [2, n/2] (n odd does not divide).
//   loop_data.onnx: x f32 [n] -> trips = int64(max(x)); Loop(trips) acc = acc * 0.5 + x from acc = x,
//     collecting each acc: acc f32 [n], accs f32 [trips, n].
#include <cstdio>
#include <filesystem>

#include "models/builder.hpp"
#include "models/onnx_import.hpp"

extern "C" {
#include "tests/capi/mlp_ref.h"
}

using namespace cldl;
using namespace cldl::graph;

namespace {

ValueShape symbolic(std::vector<int64_t> dims, std::vector<std::string> symbols) {
  ValueShape s(Shape{dims});
  s.symbols = std::move(symbols);
  return s;
}

ValueInfo unknown(const std::string& name, DType t = DType::f32) {
  ValueInfo v{name, t, ValueShape{}};
  v.shape.known = false;
  return v;
}

Node node(const std::string& name, const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
          std::map<std::string, AttrValue> attrs = {}) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

HostTensor i64s(std::vector<int64_t> v) { return HostTensor::from<int64_t>(Shape{int64_t(v.size())}, v); }

void nonzero_model(const std::string& path) {
  GraphBuilder b("nonzero", 13);
  Value x = b.input("x", DType::f32, symbolic({-1, -1}, {"r", "c"}));
  Value w = b.input("w", DType::f32, symbolic({-1}, {"k"}));
  Value nz = b.op1("NonZero", {x});
  Value idx = b.op1("Transpose", {nz}, {{"perm", std::vector<int64_t>{1, 0}}});
  Value vals = b.op1("Mul", {b.op1("GatherND", {x, idx}), w});
  b.output(nz, "nz");
  b.output(vals, "vals");
  Graph g = b.build();
  g.outputs[0].dtype = DType::i64;  // the builder declares f32 outputs
  export_onnx_file(g, path);
}

// A branch of if_data: Reshape of `x` (negated first when `negate`) to `shape`.
SubGraph reshape_branch(const std::string& name, bool negate, std::vector<int64_t> shape) {
  auto g = std::make_shared<Graph>();
  g->name = name;
  g->initializers[name + "_shape"] = i64s(shape);
  std::string src = "x";
  if (negate) {
    g->nodes.push_back(node(name + "_neg", "Neg", {"x"}, {name + "_negx"}));
    src = name + "_negx";
  }
  g->nodes.push_back(node(name + "_reshape", "Reshape", {src, name + "_shape"}, {name + "_out"}));
  g->outputs.push_back(unknown(name + "_out"));
  return g;
}

void if_model(const std::string& path) {
  GraphBuilder b("if_data", 13);
  Value x = b.input("x", DType::f32, symbolic({-1}, {"n"}));
  Value zero = b.constant("zero", HostTensor::from<float>(Shape{}, std::vector<float>{0}));
  Value positive = b.op1("Greater", {b.op1("ReduceSum", {x}, {{"keepdims", int64_t(0)}}), zero});
  Value y = b.op1("If", {positive},
                  {{"then_branch", reshape_branch("pairs", false, {-1, 2})},
                   {"else_branch", reshape_branch("halves", true, {2, -1})}});
  b.output(y, "y");
  b.output(positive, "positive");
  Graph g = b.build();
  g.outputs[1].dtype = DType::boolean;  // the builder declares f32 outputs
  export_onnx_file(g, path);
}

void loop_model(const std::string& path) {
  auto body = std::make_shared<Graph>();
  body->name = "halve_add";
  body->inputs = {ValueInfo{"i", DType::i64, ValueShape(Shape{})}, ValueInfo{"c", DType::boolean, ValueShape(Shape{})},
                  unknown("acc")};
  body->initializers["half"] = HostTensor::from<float>(Shape{}, std::vector<float>{0.5f});
  body->nodes.push_back(node("keep_going", "Identity", {"c"}, {"c_out"}));
  body->nodes.push_back(node("halve", "Mul", {"acc", "half"}, {"halved"}));
  body->nodes.push_back(node("add_x", "Add", {"halved", "x"}, {"acc_next"}));  // x: the outer graph's input
  body->nodes.push_back(node("collect", "Identity", {"acc_next"}, {"acc_scan"}));
  body->outputs = {ValueInfo{"c_out", DType::boolean, ValueShape(Shape{})}, unknown("acc_next"), unknown("acc_scan")};
  GraphBuilder b("loop_data", 13);
  Value x = b.input("x", DType::f32, symbolic({-1}, {"n"}));
  Value max = b.op1("ReduceMax", {x}, {{"keepdims", int64_t(0)}});
  Value trips = b.op1("Cast", {max}, {{"to", int64_t(7)}});  // TensorProto INT64: truncates toward zero
  Graph g = b.build();
  g.nodes.push_back(node("loop", "Loop", {trips.name, "", "x"}, {"acc", "accs"}, {{"body", SubGraph(body)}}));
  g.outputs = {ValueInfo{"acc", DType::f32, symbolic({-1}, {"n"})}, unknown("accs")};
  export_onnx_file(g, path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    std::filesystem::create_directories(argv[1]);
    GraphBuilder b("mlp");
    ValueShape xs(Shape{-1, MLP_IN});
    xs.symbols[0] = "batch";
    Value x = b.input("x", DType::f32, xs);
    HostTensor w(DType::f32, {MLP_OUT, MLP_IN}), bias(DType::f32, {MLP_OUT});
    for (int o = 0; o < MLP_OUT; ++o) {
      for (int i = 0; i < MLP_IN; ++i) w.as<float>()[o * MLP_IN + i] = mlp_weight(o, i);
      bias.as<float>()[o] = mlp_bias(o);
    }
    Value y = b.relu(b.dense(x, b.constant("W", w), b.constant("b", bias)));
    b.graph().nodes.back().outputs[0] = "y";
    y.name = "y";
    b.output(y);
    b.output(x, "x_view");
    export_onnx_file(b.build(), std::string(argv[1]) + "/mlp.onnx");

    GraphBuilder bb("branch");
    Value x2 = bb.input("x", DType::f32, Shape{4, MLP_IN});
    HostTensor v(DType::f32, {MLP_OUT, MLP_IN});
    for (int o = 0; o < MLP_OUT; ++o)
      for (int i = 0; i < MLP_IN; ++i) v.as<float>()[o * MLP_IN + i] = -0.5f * mlp_weight(o, i);
    Value a = bb.relu(bb.dense(x2, bb.constant("W", w), bb.constant("b", bias)));
    Value c = bb.dense(x2, bb.constant("V", v));
    Value z = bb.add(a, c);
    bb.graph().nodes.back().outputs[0] = "z";
    z.name = "z";
    bb.output(z);
    export_onnx_file(bb.build(), std::string(argv[1]) + "/branch.onnx");

    nonzero_model(std::string(argv[1]) + "/nonzero.onnx");
    if_model(std::string(argv[1]) + "/if_data.onnx");
    loop_model(std::string(argv[1]) + "/loop_data.onnx");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cldl_capi_models: %s\n", e.what());
    return 1;
  }
  return 0;
}
