// Writes the small ONNX models the C API, interop and Python tests load (built with the C++ builder
// API, so no binary blobs live in git). Usage: cldl_capi_models OUT_DIR
//   mlp.onnx: x f32 [batch, 5] -> y = relu(x W^T + b), W [7, 5], b [7]; x_view = Identity(x).
//   branch.onnx: x f32 [4, 5] -> z = relu(x W^T + b) + x V^T, V = -W / 2: two branches on two queues.
// The weights follow a formula the tests repeat in their own references (tests/capi/mlp_ref.h).
#include <cstdio>
#include <filesystem>

#include "models/builder.hpp"
#include "models/onnx_import.hpp"

extern "C" {
#include "tests/capi/mlp_ref.h"
}

using namespace cldl;
using namespace cldl::graph;

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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cldl_capi_models: %s\n", e.what());
    return 1;
  }
  return 0;
}
