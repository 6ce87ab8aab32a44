// Reverse-mode differentiation (models/autodiff.hpp) through the ONNX Gradient op: every backward rule against
// central finite differences, on odd shapes with broadcasting, values read twice, legacy opsets, Gradient
// inputs other than the values xs names, and the errors.
//
// How a rule is checked: y = forward(x...) on the device; the Gradient graph differentiates sum(R * y) for a
// random R of y's shape (a random cotangent: with ones, a wrong rule could still sum right). The reference is
// (f(x + h e_k) - f(x - h e_k)) / (2h) per element k of every differentiated input, f = sum(R * y) summed in
// double on the host from the f32 forward, h = 1e-2 (divided by the f32 step actually taken). Tolerance:
// |analytic - numeric| <= 1e-3 + 1e-3 |numeric|; the largest difference seen is 3.1e-4 (opset-6 Div), each
// check prints its own. The rules' inputs stay where the third derivative is small (denominators, Log and Sqrt
// in [0.7, 2]) and Relu's away from its kink (|x| >= 0.1). A wrong rule is off by far more (a dropped term or a
// transposed operand: 1e-1 and up on these sizes).
#include <cmath>
#include <algorithm>
#include <functional>
#include <random>

#include "layers/backward.hpp"
#include "models/autodiff.hpp"
#include "models/model.hpp"
#include "models/op_registry.hpp"
#include "models/passes.hpp"
#include "tests/support/onnx_util.hpp"
#include "tests/support/test_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

const char* const kTraining = "ai.onnx.preview.training";
const double kStep = 1e-2, kAtol = 1e-3, kRtol = 1e-3;

struct Input {
  std::string name;
  Shape shape;
  float lo = -1.0f, hi = 1.0f;
  bool differentiate = true;
  bool away_from_zero = false;  // |x| >= 0.1 (Relu's kink)
  bool distinct = false;        // a shuffled grid of step 0.05: no two within 2h (MaxPool's argmax stays put)
};
using Forward = std::function<Value(GraphBuilder&, std::map<std::string, Value>&)>;

HostTensor make_input(const Input& in, uint32_t seed) {
  HostTensor t = test::random_tensor(in.shape, seed, in.lo, in.hi);
  if (in.distinct) {
    std::vector<int64_t> order(size_t(t.numel()));
    for (size_t k = 0; k < order.size(); ++k) order[k] = int64_t(k);
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    for (int64_t k = 0; k < t.numel(); ++k) t.as<float>()[k] = 0.05f * float(order[size_t(k)] - t.numel() / 2);
  }
  if (in.away_from_zero)
    for (int64_t k = 0; k < t.numel(); ++k) {
      float& v = t.as<float>()[k];
      v = std::copysign(0.1f + 0.9f * std::fabs(v), v);
    }
  return t;
}

Graph build(const std::vector<Input>& inputs, const Forward& fwd, int64_t opset, const HostTensor* cotangent) {
  GraphBuilder b("autodiff", opset);
  std::map<std::string, Value> in;
  for (auto& i : inputs) in[i.name] = b.input(i.name, DType::f32, i.shape);
  Value y = fwd(b, in);
  if (!cotangent) {
    b.output(y, "y");
    Graph g = b.build();
    make_conv_weights_dynamic(g);
    make_rnn_weights_dynamic(g);
    return g;
  }
  Value r = b.op1("Mul", {y, b.constant("R", *cotangent)});
  std::vector<std::string> xs;
  std::vector<Value> xv;
  for (auto& i : inputs)
    if (i.differentiate) xs.push_back(i.name), xv.push_back(in[i.name]);
  auto grads = b.op("Gradient", xv, {{"xs", xs}, {"y", r.name}}, int(xs.size()), kTraining);
  b.graph().opsets[kTraining] = 1;
  for (size_t k = 0; k < xs.size(); ++k) b.output(grads[k], "d_" + xs[k]);
  Graph g = b.build();
  make_conv_weights_dynamic(g);  // Conv with its weights among the inputs
  make_rnn_weights_dynamic(g);   // LSTM / GRU likewise
  return g;
}

double weighted_sum(const HostTensor& y, const HostTensor& r) {
  double s = 0;
  for (int64_t k = 0; k < y.numel(); ++k) s += double(y.as<float>()[k]) * double(r.as<float>()[k]);
  return s;
}

// The check described at the top of the file; returns the largest |analytic - numeric| seen.
double check_gradients(const std::vector<Input>& inputs, const Forward& fwd, int64_t opset = 17) {
  std::map<std::string, HostTensor> feed;
  uint32_t seed = 11;
  for (auto& i : inputs) feed[i.name] = make_input(i, seed++);
  auto forward = test::compile_graph(build(inputs, fwd, opset, nullptr));
  auto fs = forward->session();
  const HostTensor y = fs->run(feed).at("y");
  const HostTensor r = test::random_tensor(y.shape(), 97);
  auto grads = test::run_graph(build(inputs, fwd, opset, &r), feed);
  double worst = 0;
  for (auto& i : inputs) {
    if (!i.differentiate) continue;
    CAPTURE(i.name);
    const HostTensor& g = grads.at("d_" + i.name);
    REQUIRE(g.dtype() == DType::f32);
    REQUIRE(g.shape() == i.shape);
    std::map<std::string, HostTensor> moved = feed;
    HostTensor& x = moved[i.name];  // copy on write: feed keeps its bytes
    const HostTensor& x_at = feed.at(i.name);
    for (int64_t k = 0; k < x.numel(); ++k) {
      const float x0 = x_at.as<float>()[k];
      const float up = float(x0 + kStep), down = float(x0 - kStep);
      x.as<float>()[k] = up;
      const double f_up = weighted_sum(fs->run(moved).at("y"), r);
      x.as<float>()[k] = down;
      const double f_down = weighted_sum(fs->run(moved).at("y"), r);
      x.as<float>()[k] = x0;
      const double numeric = (f_up - f_down) / (double(up) - double(down)), analytic = g.as<float>()[k];
      const double err = std::fabs(analytic - numeric);
      worst = std::max(worst, err);
      if (err > kAtol + kRtol * std::fabs(numeric)) {
        FAIL_CHECK("d_" << i.name << "[" << k << "]: Gradient gives " << analytic << ", finite differences "
                        << numeric);
        return worst;
      }
    }
  }
  MESSAGE("largest |analytic - numeric|: " << worst);  // the figures the tolerance is set from
  return worst;
}

Value ints(GraphBuilder& b, const std::string& name, std::vector<int64_t> v) {
  return b.constant(name, HostTensor::from<int64_t>(Shape{int64_t(v.size())}, v));
}

}  // namespace

TEST_SUITE("autodiff") {
  TEST_CASE("Add, Sub, Mul, Div with numpy broadcasting") {
    auto binary = [](const char* op) {
      return [op](GraphBuilder& b, std::map<std::string, Value>& in) { return b.op1(op, {in["a"], in["b"]}); };
    };
    SUBCASE("Add [3,1,5] + [4,5]") { check_gradients({{"a", {3, 1, 5}}, {"b", {4, 5}}}, binary("Add")); }
    SUBCASE("Sub [5] - [2,3,5]") { check_gradients({{"a", {5}}, {"b", {2, 3, 5}}}, binary("Sub")); }
    SUBCASE("Mul [3,4,5] * [3,1,1]") { check_gradients({{"a", {3, 4, 5}}, {"b", {3, 1, 1}}}, binary("Mul")); }
    SUBCASE("Div [3,5] / [5]") { check_gradients({{"a", {3, 5}}, {"b", {5}, 0.7f, 2.0f}}, binary("Div")); }
    SUBCASE("Div [] / [3,5]: a scalar numerator") {
      check_gradients({{"a", Shape{}}, {"b", {3, 5}, 0.7f, 2.0f}}, binary("Div"));
    }
  }

  TEST_CASE("opset 6 broadcasting: B lines up with A from axis") {
    for (std::string op : {"Add", "Sub", "Mul", "Div"}) {
      CAPTURE(op);
      check_gradients(
          {{"a", {2, 3, 5}}, {"b", {3, 1}, 0.7f, 2.0f}},
          [&](GraphBuilder& b, std::map<std::string, Value>& in) {
            return b.op1(op, {in["a"], in["b"]}, {{"broadcast", int64_t(1)}, {"axis", int64_t(1)}});
          },
          6);
    }
  }

  TEST_CASE("unary ops") {
    auto unary = [](std::string op) {
      return [op](GraphBuilder& b, std::map<std::string, Value>& in) { return b.op1(op, {in["x"]}); };
    };
    for (std::string op : {"Neg", "Identity", "Sigmoid", "Tanh", "Exp"}) {
      CAPTURE(op);
      check_gradients({{"x", {3, 7}}}, unary(op));
    }
    for (std::string op : {"Log", "Sqrt"}) {
      CAPTURE(op);
      check_gradients({{"x", {3, 7}, 0.7f, 2.0f}}, unary(op));
    }
    Input relu{"x", {5, 7}};
    relu.away_from_zero = true;
    check_gradients({relu}, unary("Relu"));
  }

  TEST_CASE("MatMul: 2-D, batched, broadcast batches, 1-D operands") {
    auto matmul = [](GraphBuilder& b, std::map<std::string, Value>& in) { return b.matmul(in["a"], in["b"]); };
    const std::vector<std::pair<Shape, Shape>> cases = {
        {{3, 5}, {5, 7}}, {{2, 3, 5}, {5, 7}}, {{3, 5}, {2, 5, 7}}, {{2, 1, 3, 5}, {3, 5, 4}},
        {{5}, {2, 5, 3}}, {{2, 3, 5}, {5}},    {{5}, {5}},
    };
    for (auto& [sa, sb] : cases) {
      CAPTURE(sa.str());
      CAPTURE(sb.str());
      check_gradients({{"a", sa}, {"b", sb}}, matmul);
    }
  }

  TEST_CASE("Gemm: transposes, alpha, beta, C broadcast") {
    struct Case {
      Shape a, b, c;
      bool ta, tb;
      bool has_c;
    };
    const Case cases[] = {
        {{5, 3}, {5, 7}, {7}, true, false, true},    {{3, 5}, {7, 5}, {3, 1}, false, true, true},
        {{5, 3}, {7, 5}, Shape{}, true, true, true}, {{3, 5}, {5, 7}, {3, 7}, false, false, true},
        {{3, 5}, {5, 7}, {}, false, false, false},
    };
    for (auto& c : cases) {
      CAPTURE(c.a.str());
      CAPTURE(c.b.str());
      CAPTURE(c.ta);
      CAPTURE(c.tb);
      std::vector<Input> in = {{"a", c.a}, {"b", c.b}};
      if (c.has_c) in.push_back({"c", c.c});
      check_gradients(in, [&](GraphBuilder& b, std::map<std::string, Value>& v) {
        std::vector<Value> args = {v["a"], v["b"]};
        if (c.has_c) args.push_back(v["c"]);
        return b.op1("Gemm", args,
                     {{"alpha", 0.7f}, {"beta", 1.3f}, {"transA", int64_t(c.ta)}, {"transB", int64_t(c.tb)}});
      });
    }
  }

  TEST_CASE("views: Reshape, Flatten, Squeeze, Unsqueeze, Transpose") {
    check_gradients({{"x", {3, 5}}}, [](GraphBuilder& b, auto& in) {
      return b.reshape(b.op1("Tanh", {in["x"]}), {5, 3});
    });
    check_gradients({{"x", {2, 3, 5}}}, [](GraphBuilder& b, auto& in) {
      return b.op1("Flatten", {b.op1("Sigmoid", {in["x"]})}, {{"axis", int64_t(2)}});
    });
    check_gradients({{"x", {3, 1, 5}}}, [](GraphBuilder& b, auto& in) {
      return b.op1("Squeeze", {b.op1("Exp", {in["x"]}), ints(b, "axes", {1})});
    });
    check_gradients({{"x", {3, 5}}}, [](GraphBuilder& b, auto& in) {
      return b.op1("Unsqueeze", {b.op1("Tanh", {in["x"]}), ints(b, "axes", {0, 2})});
    });
    check_gradients({{"x", {2, 3, 5}}}, [](GraphBuilder& b, auto& in) {
      return b.op1("Transpose", {b.op1("Tanh", {in["x"]})}, {{"perm", std::vector<int64_t>{2, 0, 1}}});
    });
    check_gradients({{"x", {2, 3, 5}}},
                    [](GraphBuilder& b, auto& in) { return b.op1("Transpose", {b.op1("Tanh", {in["x"]})}); });
  }

  TEST_CASE("ReduceSum, ReduceMean") {
    check_gradients({{"x", {3, 5, 7}}}, [](GraphBuilder& b, auto& in) {
      return b.op1("ReduceSum", {b.op1("Tanh", {in["x"]}), ints(b, "axes", {1})}, {{"keepdims", int64_t(0)}});
    });
    check_gradients({{"x", {3, 5, 7}}},
                    [](GraphBuilder& b, auto& in) { return b.op1("ReduceSum", {b.op1("Tanh", {in["x"]})}); });
    check_gradients({{"x", {3, 5, 7}}}, [](GraphBuilder& b, auto& in) {
      return b.op1("ReduceMean", {b.op1("Sigmoid", {in["x"]})}, {{"axes", std::vector<int64_t>{0, -1}}});
    });
    check_gradients(  // opset 11: ReduceSum's axes an attribute
        {{"x", {3, 5, 7}}},
        [](GraphBuilder& b, auto& in) {
          return b.op1("ReduceSum", {b.op1("Exp", {in["x"]})},
                       {{"axes", std::vector<int64_t>{2}}, {"keepdims", int64_t(0)}});
        },
        11);
  }

  TEST_CASE("BatchNormalization: training mode (batch statistics) and inference") {
    auto bn = [](int64_t training) {
      return [training](GraphBuilder& b, std::map<std::string, Value>& in) {
        std::map<std::string, AttrValue> a{{"epsilon", 1e-3f}};
        if (training) a["training_mode"] = int64_t(1);
        return b.op1("BatchNormalization", {in["x"], in["scale"], in["bias"], in["mean"], in["var"]}, a);
      };
    };
    auto inputs = [](Shape x, bool stats) {
      const int64_t C = x[1];
      std::vector<Input> v{
          {"x", x}, {"scale", {C}, 0.5f, 1.5f}, {"bias", {C}}, {"mean", {C}}, {"var", {C}, 0.5f, 1.5f}};
      v[3].differentiate = v[4].differentiate = stats;
      return v;
    };
    SUBCASE("training [3, 5, 4, 3]") { check_gradients(inputs({3, 5, 4, 3}, false), bn(1)); }
    SUBCASE("training, batch 1 [1, 3, 5, 7]") { check_gradients(inputs({1, 3, 5, 7}, false), bn(1)); }
    SUBCASE("training [6, 7] (no spatial axes)") { check_gradients(inputs({6, 7}, false), bn(1)); }
    SUBCASE("inference: x, scale, bias, mean, var") { check_gradients(inputs({2, 3, 5, 3}, true), bn(0)); }
  }

  TEST_CASE("activations: LeakyRelu, Elu, Softplus, Erf, Gelu, HardSigmoid, HardSwish, Clip, Pow, Max, Min") {
    auto unary = [](std::string op, std::map<std::string, AttrValue> a = {}) {
      return [op, a](GraphBuilder& b, std::map<std::string, Value>& in) { return b.op1(op, {in["x"]}, a); };
    };
    Input x{"x", {3, 7}, -2.0f, 2.0f};
    x.away_from_zero = true;  // the kinks at 0
    for (std::string op : {"LeakyRelu", "Elu", "Softplus", "Erf"}) {
      CAPTURE(op);
      check_gradients({x}, unary(op));
    }
    check_gradients({x}, unary("LeakyRelu", {{"alpha", 0.3f}}));
    check_gradients({x}, unary("Elu", {{"alpha", 0.7f}}));
    check_gradients({x}, unary("Gelu", {{"approximate", std::string("tanh")}}), 20);
    check_gradients({x}, unary("Gelu"), 20);
    // HardSigmoid / HardSwish on z = 5 x + 0.13: x on a shuffled grid of step 0.05 makes z a grid of step 0.25
    // over [-4.4, 4.4] (the flat parts included), at least 0.07 from the kinks (-3, -2.5, -1.8, 2.2, 2.5, 3), which
    // the step (0.05 in z) does not cross.
    Input wide{"x", {4, 9}};
    wide.distinct = true;
    auto scaled = [](GraphBuilder& b, Value v) {
      auto f = [&](const char* n, float c) {
        return b.constant(n, HostTensor::from<float>(Shape{}, std::vector<float>{c}));
      };
      return b.op1("Add", {b.op1("Mul", {v, f("five", 5.0f)}), f("shift", 0.13f)});
    };
    for (std::string op : {"HardSigmoid", "HardSwish"}) {
      CAPTURE(op);
      check_gradients({wide}, [op, scaled](GraphBuilder& b, auto& in) { return b.op1(op, {scaled(b, in["x"])}); });
    }
    check_gradients({wide}, [scaled](GraphBuilder& b, auto& in) {
      return b.op1("HardSigmoid", {scaled(b, in["x"])}, {{"alpha", 0.25f}, {"beta", 0.45f}});
    });
    Input c{"x", {5, 7}};
    c.distinct = true;  // none within 2h of the bounds (-0.3, 0.4 are off the grid by 0.025)
    check_gradients({c}, [](GraphBuilder& b, auto& in) {
      auto f = [&](const char* n, float v) {
        return b.constant(n, HostTensor::from<float>(Shape{}, std::vector<float>{v}));
      };
      return b.op1("Clip", {in["x"], f("lo", -0.325f), f("hi", 0.425f)});
    });
    check_gradients({c}, [](GraphBuilder& b, auto& in) {  // only a max
      return b.op1("Clip",
                   {in["x"], Value{}, b.constant("hi", HostTensor::from<float>(Shape{}, std::vector<float>{0.425f}))});
    });
    check_gradients(  // opset 6: the bounds as attributes
        {c},
        [](GraphBuilder& b, auto& in) {
          return b.op1("Clip", {in["x"]}, {{"min", -0.325f}, {"max", 0.425f}});
        },
        6);
    // Pow by a constant and by a tensor (both differentiated).
    check_gradients({{"x", {3, 5}, 0.7f, 2.0f}}, [](GraphBuilder& b, auto& in) {
      return b.op1("Pow", {in["x"], b.constant("p", HostTensor::from<float>(Shape{}, std::vector<float>{2.5f}))});
    });
    check_gradients({{"a", {3, 5}, 0.7f, 2.0f}, {"p", {5}, -1.0f, 2.0f}}, [](GraphBuilder& b, auto& in) {
      return b.op1("Pow", {in["a"], in["p"]});
    });
    // Max / Min with broadcasting; distinct values keep the winner fixed under the step.
    Input a{"a", {3, 4}}, bb{"b", {4}}, cc{"c", {3, 1}};
    a.distinct = bb.distinct = cc.distinct = true;
    for (std::string op : {"Max", "Min"}) {
      CAPTURE(op);
      check_gradients({a, bb}, [op](GraphBuilder& b, auto& in) {
        return b.op1(
            op,
            {in["a"],
             b.op1("Add", {in["b"], b.constant("s1", HostTensor::from<float>(Shape{}, std::vector<float>{0.0123f}))})});
      });
    }
    // Three inputs with shifted grids so no two coincide.
    check_gradients({a, bb, cc}, [](GraphBuilder& b, auto& in) {
      auto shift = [&](Value v, const char* n, float d) {
        return b.op1("Add", {v, b.constant(n, HostTensor::from<float>(Shape{}, std::vector<float>{d}))});
      };
      return b.op1("Max", {in["a"], shift(in["b"], "s1", 0.0123f), shift(in["c"], "s2", 0.0311f)});
    });
  }

  TEST_CASE("LayerNormalization: last axis, last two axes, batch 1") {
    auto ln = [](int64_t axis) {
      return [axis](GraphBuilder& b, std::map<std::string, Value>& in) {
        return b.op1("LayerNormalization", {in["x"], in["scale"], in["bias"]}, {{"axis", axis}, {"epsilon", 1e-3f}});
      };
    };
    check_gradients({{"x", {3, 4, 7}}, {"scale", {7}, 0.5f, 1.5f}, {"bias", {7}}}, ln(-1));
    check_gradients({{"x", {3, 4, 5}}, {"scale", {4, 5}, 0.5f, 1.5f}, {"bias", {4, 5}}}, ln(1));
    check_gradients({{"x", {1, 9}}, {"scale", {9}, 0.5f, 1.5f}, {"bias", {9}}}, ln(-1));
  }

  TEST_CASE("Slice, Concat, Pad") {
    auto i64 = [](GraphBuilder& b, const char* n, std::vector<int64_t> v) { return ints(b, n, std::move(v)); };
    check_gradients({{"x", {5, 7, 3}}}, [&](GraphBuilder& b, auto& in) {  // negative start, end past the edge, axes
      return b.op1("Slice",
                   {b.op1("Tanh", {in["x"]}), i64(b, "s", {-4, 1}), i64(b, "e", {100, 3}), i64(b, "a", {1, 0})});
    });
    check_gradients(
        {{"x", {4, 6}}},
        [&](GraphBuilder& b, auto& in) {  // opset 9: attributes
          return b.op1("Slice", {in["x"]},
                       {{"starts", std::vector<int64_t>{1}},
                        {"ends", std::vector<int64_t>{-1}},
                        {"axes", std::vector<int64_t>{1}}});
        },
        9);
    check_gradients({{"a", {2, 3, 5}}, {"b", {2, 1, 5}}, {"c", {2, 4, 5}}}, [](GraphBuilder& b, auto& in) {
      return b.op1("Tanh", {b.op1("Concat", {in["a"], in["b"], in["c"]}, {{"axis", int64_t(-2)}})});
    });
    check_gradients({{"x", {2, 3, 5}}}, [&](GraphBuilder& b, auto& in) {
      return b.op1("Tanh", {b.op1("Pad", {in["x"], i64(b, "p", {0, 1, 2, 1, 0, 3})})});
    });
    check_gradients(
        {{"x", {3, 4}}},
        [&](GraphBuilder& b, auto& in) {  // opset 18: axes
          return b.op1("Sigmoid", {b.op1("Pad", {in["x"], i64(b, "p", {2, 1}), Value{}, i64(b, "a", {-1})})});
        },
        18);
  }

  TEST_CASE("Slice with steps of either sign; Split; Pad in reflect and edge modes") {
    auto i64 = [](GraphBuilder& b, const char* n, std::vector<int64_t> v) { return ints(b, n, std::move(v)); };
    auto slice = [&](Shape x, std::vector<int64_t> st, std::vector<int64_t> en, std::vector<int64_t> ax,
                     std::vector<int64_t> sp) {
      CAPTURE(x.str());
      check_gradients({{"x", x}}, [&](GraphBuilder& b, auto& in) {
        return b.op1("Tanh", {b.op1("Slice", {in["x"], i64(b, "s", st), i64(b, "e", en), i64(b, "a", ax),
                                              i64(b, "t", sp)})});
      });
    };
    slice({5, 7, 3}, {1}, {7}, {1}, {2});                                 // 1, 3, 5
    slice({5, 7, 3}, {4, -1}, {-100, -4}, {0, 2}, {-2, -1});              // 4, 2, 0; all of axis 2 reversed
    slice({1, 9, 4}, {0, 3, 0}, {9, 0, 1}, {1, 2, 0}, {3, -3, 1});        // batch 1: 0, 3, 6; 3 alone
    slice({6, 5}, {-2, 100}, {0, 1}, {0, -1}, {-3, -2});                  // 4, 1; 4, 2 (start past the end)
    slice({8, 3}, {1}, {8}, {0}, {4});                                    // 1, 5: a tail shorter than the step

    // Split: opset 13 split sizes, an output y does not read (zeros), the first output unread too.
    check_gradients({{"x", {3, 7, 2}}}, [&](GraphBuilder& b, auto& in) {
      auto o = b.op("Split", {in["x"], i64(b, "sp", {2, 4, 1})}, {{"axis", int64_t(1)}}, 3);
      return b.op1("Concat", {b.op1("Tanh", {o[0]}), b.op1("Sigmoid", {o[2]})}, {{"axis", int64_t(1)}});
    });
    check_gradients({{"x", {1, 5}}}, [&](GraphBuilder& b, auto& in) {
      auto o = b.op("Split", {in["x"], i64(b, "sp", {1, 3, 1})}, {{"axis", int64_t(-1)}}, 3);
      return b.op1("Tanh", {b.op1("Mul", {o[1], o[1]})});
    });
    check_gradients({{"x", {6, 5}}}, [&](GraphBuilder& b, auto& in) {  // equal parts, each read
      auto o = b.op("Split", {in["x"]}, {}, 3);
      return b.op1("Add", {b.op1("Add", {b.op1("Tanh", {o[0]}), o[1]}), b.op1("Mul", {o[2], o[2]})});
    });

    // Pad reflect / edge: every element of dy summed onto the element of x it copies.
    auto pad = [&](Shape x, const char* mode, std::vector<int64_t> pads) {
      const std::string what = mode;
      CAPTURE(what);
      check_gradients({{"x", x}}, [&](GraphBuilder& b, auto& in) {
        return b.op1("Tanh", {b.op1("Pad", {in["x"], i64(b, "p", pads)}, {{"mode", std::string(mode)}})});
      });
    };
    pad({2, 3, 5}, "reflect", {0, 1, 2, 0, 2, 4});
    pad({1, 4, 3}, "edge", {0, 3, 1, 0, 2, 5});
    pad({3, 1}, "edge", {2, 0, 1, 3});
    pad({1, 7}, "reflect", {0, 0, 0, 6});
    check_gradients(
        {{"x", {3, 4}}},
        [&](GraphBuilder& b, auto& in) {  // opset 18: axes
          return b.op1("Sigmoid", {b.op1("Pad", {in["x"], i64(b, "p", {3, 2}), Value{}, i64(b, "a", {-1})},
                                         {{"mode", std::string("reflect")}})});
        },
        18);
  }

  TEST_CASE("Gather: repeated and negative indices, axis 0 and 1, int32, a scalar index") {
    auto gather = [](HostTensor idx, int64_t axis) {
      return [idx, axis](GraphBuilder& b, std::map<std::string, Value>& in) {
        return b.op1("Tanh", {b.op1("Gather", {in["x"], b.constant("idx", idx)}, {{"axis", axis}})});
      };
    };
    // rows 3 and 0 picked twice (3 as -2), row 1 never: its gradient is 0
    check_gradients({{"x", {5, 3}}},
                    gather(HostTensor::from<int64_t>(Shape{2, 3}, std::vector<int64_t>{3, 0, -2, 4, 0, 2}), 0));
    check_gradients({{"x", {2, 7, 3}}},
                    gather(HostTensor::from<int32_t>(Shape{4}, std::vector<int32_t>{6, -1, 0, 2}), 1));
    check_gradients({{"x", {4, 5}}}, gather(HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{2}), 1));
  }

  TEST_CASE("Dropout: the ONNX op (inference) is the identity; TrainingDropout's mask per step") {
    check_gradients({{"x", {3, 5}}}, [](GraphBuilder& b, auto& in) {
      return b.op1(
          "Tanh",
          {b.op("Dropout", {in["x"], b.constant("r", HostTensor::from<float>(Shape{}, std::vector<float>{0.3f}))})[0]});
    });
    auto training = [](float ratio, int64_t step) {
      return [ratio, step](GraphBuilder& b, std::map<std::string, Value>& in) {
        auto d = b.op("TrainingDropout",
                      {in["x"], b.constant("T", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{step}))},
                      {{"ratio", ratio}, {"seed", int64_t(7)}}, 2, kFusedDomain);
        return b.op1("Tanh", {d[0]});
      };
    };
    check_gradients({{"x", {4, 9}}}, training(0.4f, 3));
    check_gradients({{"x", {2, 3}}}, training(0.0f, 1));
    // The mask: about ratio of the elements dropped, the rest scaled by 1 / (1 - ratio); the same for the same
    // step, another for the next (100 000 elements: the count is within 5 standard deviations of its mean).
    auto mask = [&](float ratio, int64_t step) {
      GraphBuilder b("mask", 17);
      Value x = b.input("x", DType::f32, Shape{100000});
      auto d =
          b.op("TrainingDropout", {x, b.constant("T", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{step}))},
               {{"ratio", ratio}, {"seed", int64_t(7)}}, 2, kFusedDomain);
      b.output(d[0], "y");
      b.output(d[1], "scale");
      HostTensor ones(DType::f32, Shape{100000});
      for (int64_t k = 0; k < ones.numel(); ++k) ones.as<float>()[k] = 2.0f;
      return test::run_graph(b.build(), {{"x", ones}});
    };
    for (float ratio : {0.1f, 0.5f, 0.9f}) {
      CAPTURE(ratio);
      auto a = mask(ratio, 5), same = mask(ratio, 5), next = mask(ratio, 6);
      int64_t dropped = 0, differ = 0;
      const float keep = 1.0f / (1.0f - ratio);
      for (int64_t k = 0; k < 100000; ++k) {
        const float sc = a.at("scale").as<float>()[k];
        REQUIRE((sc == 0.0f || sc == keep));
        REQUIRE(a.at("y").as<float>()[k] == 2.0f * sc);
        REQUIRE(same.at("scale").as<float>()[k] == sc);
        dropped += sc == 0.0f;
        differ += next.at("scale").as<float>()[k] != sc;
      }
      const double mean = 100000.0 * ratio, sd = std::sqrt(100000.0 * ratio * (1 - ratio));
      CHECK(std::fabs(double(dropped) - mean) < 5 * sd);
      const double p_differ = 2 * ratio * (1 - ratio);  // independent masks
      CHECK(std::fabs(double(differ) - 100000.0 * p_differ) < 5 * std::sqrt(100000.0 * p_differ * (1 - p_differ)));
    }
    auto all = mask(1.0f, 1), none = mask(0.0f, 1);
    for (int64_t k = 0; k < 100000; k += 997) {
      CHECK(all.at("y").as<float>()[k] == 0.0f);
      CHECK(none.at("y").as<float>()[k] == 2.0f);
    }
  }

  TEST_CASE("Softmax: opset 13 along one axis, opset 11 coerced to 2-D") {
    check_gradients({{"x", {3, 5, 7}}}, [](GraphBuilder& b, auto& in) { return b.softmax(in["x"], 1); });
    check_gradients(
        {{"x", {3, 5, 7}}}, [](GraphBuilder& b, auto& in) { return b.softmax(in["x"], 1); }, 11);
  }

  TEST_CASE("Conv: strides, pads, dilations, groups, auto_pad, 1-D; bias") {
    using V = std::vector<int64_t>;
    auto conv = [](std::map<std::string, AttrValue> attrs, bool bias = true) {
      return [attrs, bias](GraphBuilder& b, std::map<std::string, Value>& in) {
        std::vector<Value> ins{in["x"], in["w"]};
        if (bias) ins.push_back(in["b"]);
        return b.op1("Conv", ins, attrs);
      };
    };
    SUBCASE("stride 2x1, asymmetric pads, dilation 1x2") {
      check_gradients({{"x", {2, 3, 7, 6}}, {"w", {4, 3, 3, 2}}, {"b", {4}}},
                      conv({{"strides", V{2, 1}}, {"pads", V{1, 0, 0, 1}}, {"dilations", V{1, 2}}}));
    }
    SUBCASE("group 2, batch 1") {
      check_gradients({{"x", {1, 4, 5, 7}}, {"w", {6, 2, 3, 3}}, {"b", {6}}},
                      conv({{"group", int64_t(2)}, {"pads", V{1, 1, 1, 1}}}));
    }
    SUBCASE("depthwise, stride 2, SAME_UPPER, no bias") {
      check_gradients({{"x", {2, 3, 7, 5}}, {"w", {3, 1, 3, 3}}},
                      conv({{"group", int64_t(3)}, {"strides", V{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}},
                           false));
    }
    SUBCASE("group 1, batch 3, pads 1 (the GEMM form: im2col + GEMM, GEMM + col2im)") {
      check_gradients({{"x", {3, 2, 5, 4}}, {"w", {3, 2, 3, 3}}, {"b", {3}}}, conv({{"pads", V{1, 1, 1, 1}}}));
    }
    SUBCASE("1x1, batch 3, no bias (the GEMM form on x in place of col)") {
      check_gradients({{"x", {3, 4, 3, 5}}, {"w", {2, 4, 1, 1}}}, conv({}, false));
    }
    SUBCASE("1-D: stride 2, dilation 2, pads 1, 2") {
      check_gradients({{"x", {2, 3, 11}}, {"w", {2, 3, 3}}, {"b", {2}}},
                      conv({{"strides", V{2}}, {"dilations", V{2}}, {"pads", V{1, 2}}}));
    }
    SUBCASE("72 weight planes (the filter gradient's every-tap kernel), stride 2, group 2, asymmetric pads") {
      check_gradients({{"x", {2, 8, 5, 6}}, {"w", {18, 4, 3, 2}}, {"b", {18}}},
                      conv({{"strides", V{2, 1}}, {"group", int64_t(2)}, {"pads", V{1, 0, 2, 1}}}));
    }
  }

  TEST_CASE("ConvGrad's GEMM form (im2col + GEMM, GEMM + col2im) equals its direct kernels") {
    // Each mode of ConvGrad forced to gemm and to direct on the same random data: odd planes, strides 1 and 2,
    // asymmetric pads, dilation, 1-D, the 1x1 window read in place, batch 1 and 3. The direct kernels are the
    // reference the finite-difference cases above check (the automatic choice, gemm for group 1, runs there).
    struct Case {
      Shape x;
      int m;
      std::array<int, 2> k, s, d, pb, pe;
    };
    const std::vector<Case> cases = {
        {{3, 5, 7, 6}, 4, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},  // the digits CNN's form
        {{1, 3, 9, 7}, 6, {3, 2}, {2, 1}, {1, 2}, {1, 0}, {0, 1}},  // batch 1, stride 2x1, dilation 1x2
        {{3, 4, 5, 5}, 5, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},  // 1x1: x and dx in place of col
        {{3, 4, 6, 5}, 3, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}},  // 1x1 with stride 2: through col
        {{3, 3, 1, 11}, 2, {1, 3}, {1, 2}, {1, 2}, {0, 1}, {0, 2}},  // 1-D (H = 1)
        {{1, 2, 2, 3}, 7, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},  // a 2x3 plane, most taps in the padding
    };
    for (const auto& c : cases) {
      WindowGeometry g;
      g.x = c.x;
      g.kernel = c.k, g.stride = c.s, g.dilation = c.d, g.pad_begin = c.pb, g.pad_end = c.pe;
      int64_t out[2];
      for (int i = 0; i < 2; ++i)
        out[i] = (c.x[size_t(2 + i)] + c.pb[size_t(i)] + c.pe[size_t(i)] - (c.k[size_t(i)] - 1) * c.d[size_t(i)] - 1) /
                     c.s[size_t(i)] + 1;
      g.y = Shape{c.x[0], c.m, out[0], out[1]};
      const Shape w{c.m, c.x[1], c.k[0], c.k[1]};
      CAPTURE(c.x.str());
      CAPTURE(g.y.str());
      const HostTensor x = test::random_tensor(c.x, 21), wt = test::random_tensor(w, 22),
                       b = test::random_tensor(Shape{c.m}, 23), dy = test::random_tensor(g.y, 24);
      for (auto mode : {ConvGradMode::forward, ConvGradMode::data, ConvGradMode::filter}) {
        CAPTURE(int(mode));
        auto run = [&](ConvGradAlgo algo) {
          ConvGradConfig cfg;
          cfg.geo = g, cfg.w = w, cfg.mode = mode, cfg.algo = algo, cfg.bias = mode == ConvGradMode::forward;
          auto op = ConvGrad::create(test::ctx(), 0, cfg);
          if (algo == ConvGradAlgo::gemm) CHECK(op->algorithm().find("GEMM") != std::string::npos);
          std::vector<Tensor> in;
          if (mode == ConvGradMode::forward) in = {test::ctx().upload(x), test::ctx().upload(wt), test::ctx().upload(b)};
          else if (mode == ConvGradMode::data) in = {test::ctx().upload(dy), test::ctx().upload(wt)};
          else in = {test::ctx().upload(dy), test::ctx().upload(x)};
          const Shape os = mode == ConvGradMode::forward ? g.y : mode == ConvGradMode::data ? c.x : w;
          Tensor o = test::ctx().upload(test::random_tensor(os, 25));  // garbage: every element must be written
          Tensor ws;
          if (op->workspace_bytes())
            ws = test::ctx().upload(test::random_tensor(Shape{int64_t(op->workspace_bytes() / 4)}, 26));
          auto ec = test::ctx().exec();
          const Tensor outs[1] = {o};
          op->enqueue(in, outs, op->workspace_bytes() ? &ws : nullptr, ec);
          return test::ctx().download(o);
        };
        const HostTensor got = run(ConvGradAlgo::gemm), want = run(ConvGradAlgo::direct);
        REQUIRE(got.numel() == want.numel());
        CLDL_CHECK_CLOSE(got.as<float>(), want.as<float>(), size_t(got.numel()), 1e-5, 1e-5);
      }
    }
    ConvGradConfig depthwise;
    depthwise.geo.x = Shape{1, 2, 3, 3}, depthwise.geo.y = Shape{1, 2, 3, 3}, depthwise.geo.kernel = {1, 1};
    depthwise.w = Shape{2, 1, 1, 1}, depthwise.group = 2, depthwise.algo = ConvGradAlgo::gemm;
    CHECK_THROWS_WITH(ConvGrad::create(test::ctx(), 0, depthwise),
                      doctest::Contains("ConvGradData: the gemm algorithm needs group 1, got group 2"));
  }

  TEST_CASE("ConvTranspose: dX for strides, pads, output_padding, dilations, groups, auto_pad, output_shape, 1-D") {
    using V = std::vector<int64_t>;
    auto convt = [](Shape w, std::map<std::string, AttrValue> attrs) {
      return [w, attrs](GraphBuilder& b, std::map<std::string, Value>& in) {
        return b.op1("ConvTranspose", {in["x"], b.constant("W", test::random_tensor(w, 5, -1.0f, 1.0f))}, attrs);
      };
    };
    check_gradients({{"x", {2, 3, 4, 5}}}, convt({3, 2, 3, 3}, {{"strides", V{2, 1}}, {"pads", V{1, 0, 0, 1}}}));
    check_gradients(
        {{"x", {1, 4, 3, 4}}},
        convt({4, 3, 2, 3},
              {{"strides", V{2, 3}}, {"output_padding", V{1, 2}}, {"group", int64_t(2)}, {"dilations", V{1, 2}}}));
    check_gradients({{"x", {2, 2, 3, 3}}},
                    convt({2, 3, 3, 3}, {{"strides", V{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}}));
    check_gradients({{"x", {2, 2, 3, 4}}}, convt({2, 2, 3, 3}, {{"strides", V{2, 2}}, {"output_shape", V{8, 9}}}));
    check_gradients({{"x", {2, 3, 7}}}, convt({3, 2, 4}, {{"strides", V{3}}, {"pads", V{2, 1}}}));
  }

  TEST_CASE("ConvTransposeDynamic (the Trainer's ConvTranspose): ConvTranspose's output; dX and dW") {
    using V = std::vector<int64_t>;
    struct Case {
      Shape x, w;
      std::map<std::string, AttrValue> attrs;
    };
    const std::vector<Case> cases = {
        {{2, 3, 4, 5}, {3, 2, 3, 3}, {{"strides", V{2, 1}}, {"pads", V{1, 0, 0, 1}}}},
        {{1, 4, 3, 4}, {4, 3, 2, 3}, {{"strides", V{2, 3}}, {"output_padding", V{1, 2}}, {"group", int64_t(2)}, {"dilations", V{1, 2}}}},
        {{2, 2, 3, 3}, {2, 3, 3, 3}, {{"strides", V{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}}},
        {{2, 2, 3, 4}, {2, 2, 3, 3}, {{"strides", V{2, 2}}, {"output_shape", V{8, 9}}}},
        {{1, 3, 7}, {3, 2, 4}, {{"strides", V{3}}, {"pads", V{2, 1}}}},
    };
    for (auto& c : cases) {
      CAPTURE(c.x.str());
      const HostTensor x = test::random_tensor(c.x, 3), w = test::random_tensor(c.w, 4);
      GraphBuilder r("convt", 17);
      r.output(r.op1("ConvTranspose", {r.input("x", DType::f32, c.x), r.constant("w", w)}, c.attrs), "y");
      const HostTensor ref = test::run_graph(r.build(), {{"x", x}}).at("y");
      GraphBuilder d("convt_dynamic", 17);
      d.output(d.op("ConvTransposeDynamic", {d.input("x", DType::f32, c.x), d.input("w", DType::f32, c.w)}, c.attrs,
                    1, kFusedDomain)[0],
               "y");
      const HostTensor got = test::run_graph(d.build(), {{"x", x}, {"w", w}}).at("y");
      REQUIRE(got.shape() == ref.shape());
      for (int64_t k = 0; k < ref.numel(); ++k) REQUIRE(std::fabs(got.as<float>()[k] - ref.as<float>()[k]) <= 1e-5f);
      check_gradients({{"x", c.x}, {"w", c.w}}, [&](GraphBuilder& b, auto& in) {
        return b.op1("Tanh", {b.op("ConvTransposeDynamic", {in["x"], in["w"]}, c.attrs, 1, kFusedDomain)[0]});
      });
    }
  }

  TEST_CASE("ConvDynamic (run-time weights) computes what Conv does") {
    using V = std::vector<int64_t>;
    struct Case {
      Shape x, w;
      std::map<std::string, AttrValue> attrs;
    };
    const std::vector<Case> cases = {
        {{2, 3, 7, 6}, {4, 3, 3, 2}, {{"strides", V{2, 1}}, {"pads", V{1, 0, 0, 1}}, {"dilations", V{1, 2}}}},
        {{1, 4, 5, 7}, {6, 2, 3, 3}, {{"group", int64_t(2)}, {"pads", V{1, 1, 1, 1}}}},
        {{2, 3, 7, 5}, {3, 1, 3, 3}, {{"group", int64_t(3)}, {"strides", V{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}}},
        {{2, 3, 11}, {2, 3, 3}, {{"strides", V{2}}, {"dilations", V{2}}, {"pads", V{1, 2}}}},
    };
    for (auto& c : cases) {
      CAPTURE(c.x.str());
      const HostTensor x = test::random_tensor(c.x, 3), w = test::random_tensor(c.w, 4),
                       bias = test::random_tensor(Shape{c.w[0]}, 5);
      auto build_conv = [&](bool dynamic) {
        GraphBuilder b("conv", 17);
        Value xv = b.input("x", DType::f32, c.x);
        Value wv = dynamic ? b.input("w", DType::f32, c.w) : b.constant("w", w);
        Value bv = dynamic ? b.input("b", DType::f32, Shape{c.w[0]}) : b.constant("b", bias);
        b.output(b.op1("Conv", {xv, wv, bv}, c.attrs), "y");
        Graph g = b.build();
        CHECK(make_conv_weights_dynamic(g) == (dynamic ? 1u : 0u));
        return g;
      };
      const HostTensor ref = test::run_graph(build_conv(false), {{"x", x}}).at("y");
      const HostTensor got = test::run_graph(build_conv(true), {{"x", x}, {"w", w}, {"b", bias}}).at("y");
      REQUIRE(got.shape() == ref.shape());
      for (int64_t k = 0; k < ref.numel(); ++k) REQUIRE(std::fabs(got.as<float>()[k] - ref.as<float>()[k]) <= 1e-5f);
    }
  }

  TEST_CASE("MaxPool, AveragePool, GlobalAveragePool") {
    using V = std::vector<int64_t>;
    auto pool = [](std::string op, std::map<std::string, AttrValue> attrs) {
      return [op, attrs](GraphBuilder& b, std::map<std::string, Value>& in) { return b.op1(op, {in["x"]}, attrs); };
    };
    Input x{"x", {2, 3, 7, 9}};
    x.distinct = true;
    SUBCASE("MaxPool 3x3 stride 2 pads 1 (overlapping windows)") {
      check_gradients({x}, pool("MaxPool", {{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}}));
    }
    SUBCASE("MaxPool 2x2 stride 2 ceil_mode, batch 1") {
      Input x1{"x", {1, 2, 7, 9}};
      x1.distinct = true;
      check_gradients({x1}, pool("MaxPool", {{"kernel_shape", V{2, 2}}, {"strides", V{2, 2}}, {"ceil_mode", int64_t(1)}}));
    }
    SUBCASE("MaxPool windows that tile the input (the kernel's own path): 2x2 / 2 and 3x2 / 3x2, tails uncovered") {
      check_gradients({x}, pool("MaxPool", {{"kernel_shape", V{2, 2}}, {"strides", V{2, 2}}}));
      check_gradients({x}, pool("MaxPool", {{"kernel_shape", V{3, 2}}, {"strides", V{3, 2}}}));
      Input x1{"x", {2, 3, 13}};
      x1.distinct = true;
      check_gradients({x1}, pool("MaxPool", {{"kernel_shape", V{3}}, {"strides", V{3}}, {"ceil_mode", int64_t(1)}}));
    }
    SUBCASE("MaxPool dilation 2, SAME_LOWER") {
      check_gradients({x}, pool("MaxPool", {{"kernel_shape", V{2, 3}}, {"dilations", V{2, 2}},
                                            {"auto_pad", std::string("SAME_LOWER")}}));
    }
    SUBCASE("MaxPool 1-D") {
      Input x1{"x", {2, 3, 13}};
      x1.distinct = true;
      check_gradients({x1}, pool("MaxPool", {{"kernel_shape", V{3}}, {"strides", V{2}}}));
    }
    SUBCASE("AveragePool pads, count_include_pad 0 and 1") {
      for (int64_t include : {0, 1}) {
        CAPTURE(include);
        check_gradients({{"x", {2, 3, 7, 9}}},
                        pool("AveragePool", {{"kernel_shape", V{3, 2}}, {"strides", V{2, 2}}, {"pads", V{1, 1, 1, 0}},
                                             {"count_include_pad", include}}));
      }
    }
    SUBCASE("AveragePool ceil_mode") {
      check_gradients({{"x", {1, 2, 8, 7}}},
                      pool("AveragePool", {{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}}, {"ceil_mode", int64_t(1)}}));
    }
    SUBCASE("GlobalAveragePool") { check_gradients({{"x", {2, 3, 5, 7}}}, pool("GlobalAveragePool", {})); }
  }

  TEST_CASE("LogSoftmax: opset 13 along one axis, opset 11 coerced to 2-D") {
    auto ls = [](GraphBuilder& b, std::map<std::string, Value>& in) {
      return b.op1("LogSoftmax", {in["x"]}, {{"axis", int64_t(1)}});
    };
    check_gradients({{"x", {3, 5, 7}}}, ls);
    check_gradients({{"x", {3, 5, 7}}}, ls, 11);
  }

  TEST_CASE("SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss: reductions, weights, ignore_index") {
    // Targets of 5 positions, one of them -1 (ignored where ignore_index says so).
    auto loss = [](std::string op, std::string reduction, bool weights, bool ignore, Shape targets,
                   bool log_prob = false) {
      return [=](GraphBuilder& b, std::map<std::string, Value>& in) {
        std::vector<int64_t> t(size_t(targets.numel()));
        for (size_t k = 0; k < t.size(); ++k) t[k] = int64_t((k * 3 + 1) % 4);
        if (ignore) t[2] = -1;
        std::vector<Value> ins{in["x"], b.constant("t", HostTensor::from<int64_t>(targets, t))};
        if (weights)
          ins.push_back(b.constant("w", HostTensor::from<float>(Shape{4}, std::vector<float>{0.5f, 2.0f, 1.5f, 0.25f})));
        std::map<std::string, AttrValue> attrs{{"reduction", reduction}};
        if (ignore) attrs["ignore_index"] = int64_t(-1);
        auto outs = b.op(op, ins, attrs, log_prob ? 2 : 1);
        return outs[0];
      };
    };
    for (std::string reduction : {"mean", "sum", "none"})
      for (bool weights : {false, true})
        for (bool ignore : {false, true}) {
          CAPTURE(reduction);
          CAPTURE(weights);
          CAPTURE(ignore);
          check_gradients({{"x", {5, 4}}}, loss("SoftmaxCrossEntropyLoss", reduction, weights, ignore, Shape{5}));
          check_gradients({{"x", {5, 4}}}, loss("NegativeLogLikelihoodLoss", reduction, weights, ignore, Shape{5}));
        }
    SUBCASE("[N, C, d1, d2] scores, int64 targets [N, d1, d2]") {
      check_gradients({{"x", {2, 4, 3, 5}}}, loss("SoftmaxCrossEntropyLoss", "mean", true, true, Shape{2, 3, 5}));
    }
    SUBCASE("with the log_prob output (the rule reads it instead of computing a log-softmax)") {
      check_gradients({{"x", {5, 4}}}, loss("SoftmaxCrossEntropyLoss", "mean", false, false, Shape{5}, true));
    }
  }

  TEST_CASE("a value read twice sums its gradients") {
    check_gradients({{"x", {3, 5}}}, [](GraphBuilder& b, auto& in) { return b.op1("Mul", {in["x"], in["x"]}); });
    // h = tanh(x); y = h * (h + x): x reaches y three ways.
    check_gradients({{"x", {3, 5}}}, [](GraphBuilder& b, auto& in) {
      Value h = b.op1("Tanh", {in["x"]});
      return b.op1("Mul", {h, b.add(h, in["x"])});
    });
  }

  TEST_CASE("an MLP: Gemm, Relu, MatMul with a broadcast bias, Softmax, Log, ReduceMean") {
    Input x{"x", {5, 7}};
    x.differentiate = false;
    check_gradients({x, {"w1", {9, 7}}, {"b1", {9}}, {"w2", {9, 3}}, {"b2", {3}}}, [](GraphBuilder& b, auto& in) {
      Value h = b.relu(b.gemm(in["x"], in["w1"], in["b1"], 1.0f, 1.0f, false, true));
      Value z = b.add(b.matmul(h, in["w2"]), in["b2"]);
      return b.op1("ReduceMean", {b.op1("Log", {b.softmax(z, -1)})}, {{"axes", std::vector<int64_t>{1}}});
    });
  }

  TEST_CASE("the backward runs as device ops; y not a scalar is seeded with ones") {
    // d sum(x * w) / dx = w: exact.
    GraphBuilder b("seed", 17);
    Value x = b.input("x", DType::f32, Shape{3, 5});
    Value w = b.input("w", DType::f32, Shape{5});
    Value y = b.op1("Mul", {x, w});
    auto d = b.op("Gradient", {x, w}, {{"xs", std::vector<std::string>{x.name, w.name}}, {"y", y.name}}, 2, kTraining);
    b.graph().opsets[kTraining] = 1;
    b.output(d[0], "dx");
    b.output(d[1], "dw");
    Graph g = b.build();
    Graph planned = g;
    prepare(planned);
    for (auto& n : planned.nodes) {
      CAPTURE(n.describe());
      CHECK(n.op_type != "Gradient");
      const OpDef* def = find_op(n.op_type, n.domain);
      REQUIRE(def != nullptr);
      const bool on_device = def->lower || def->view_of >= 0;
      CHECK(on_device);
    }
    HostTensor xv = test::random_tensor(Shape{3, 5}, 1), wv = test::random_tensor(Shape{5}, 2);
    auto out = test::run_graph(g, {{"x", xv}, {"w", wv}});
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) CHECK(out.at("dx").as<float>()[i * 5 + j] == wv.as<float>()[j]);
    for (int j = 0; j < 5; ++j) {
      double s = 0;
      for (int i = 0; i < 3; ++i) s += xv.as<float>()[i * 5 + j];
      CHECK(out.at("dw").as<float>()[j] == doctest::Approx(s).epsilon(1e-6));
    }
  }

  TEST_CASE("Gradient inputs other than the values xs and zs name: the forward is computed on them") {
    // c = sigmoid(a) * b, differentiated at (a2, b2) while the graph's own c stays at (a, b).
    auto graph = [](bool at_other) {
      GraphBuilder b("clone", 17);
      Value a = b.input("a", DType::f32, Shape{3, 5}), bb = b.input("b", DType::f32, Shape{5});
      Value a2 = b.input("a2", DType::f32, Shape{3, 5}), b2 = b.input("b2", DType::f32, Shape{5});
      Value c = b.op1("Mul", {b.op1("Sigmoid", {a}), bb});
      auto d = b.op("Gradient", {at_other ? a2 : a, at_other ? b2 : bb},
                    {{"xs", std::vector<std::string>{"a"}}, {"zs", std::vector<std::string>{"b"}}, {"y", c.name}}, 1,
                    kTraining);
      b.graph().opsets[kTraining] = 1;
      b.output(c, "c");
      b.output(d[0], "da");
      return b.build();
    };
    HostTensor a = test::random_tensor(Shape{3, 5}, 1), bv = test::random_tensor(Shape{5}, 2);
    HostTensor a2 = test::random_tensor(Shape{3, 5}, 3), b2 = test::random_tensor(Shape{5}, 4);
    auto other = test::run_graph(graph(true), {{"a", a}, {"b", bv}, {"a2", a2}, {"b2", b2}});
    auto there = test::run_graph(graph(false), {{"a", a2}, {"b", b2}, {"a2", a}, {"b2", bv}});
    auto here = test::run_graph(graph(false), {{"a", a}, {"b", bv}, {"a2", a2}, {"b2", b2}});
    CLDL_CHECK_CLOSE(other.at("da").as<float>(), there.at("da").as<float>(), 15, 1e-6, 1e-7);
    CLDL_CHECK_CLOSE(other.at("c").as<float>(), here.at("c").as<float>(), 15, 1e-6, 1e-7);
    // da = sigmoid'(a2) * b2, not at (a, b).
    for (int k = 0; k < 15; ++k) {
      const double s = 1.0 / (1.0 + std::exp(-double(a2.as<float>()[k])));
      CHECK(other.at("da").as<float>()[k] == doctest::Approx(s * (1 - s) * b2.as<float>()[k % 5]).epsilon(1e-5));
    }
  }

  TEST_CASE("an xs value y does not depend on gets zeros; an output left out is not made") {
    GraphBuilder b("zeros", 17);
    Value x = b.input("x", DType::f32, Shape{3, 5}), u = b.input("u", DType::f32, Shape{7});
    Value y = b.op1("Exp", {x});
    auto d = b.op("Gradient", {x, u}, {{"xs", std::vector<std::string>{"x", "u"}}, {"y", y.name}}, 2, kTraining);
    b.graph().opsets[kTraining] = 1;
    b.graph().nodes.back().outputs[0] = "";
    b.output(d[1], "du");
    auto out = test::run_graph(b.build(),
                               {{"x", test::random_tensor(Shape{3, 5}, 1)}, {"u", test::random_tensor(Shape{7}, 2)}});
    REQUIRE(out.at("du").shape() == Shape{7});
    for (int k = 0; k < 7; ++k) CHECK(out.at("du").as<float>()[k] == 0.0f);
  }

  TEST_CASE("after a stage boundary: the Gradient node is planned with the rest") {
    // y = x * sum(m[nonzero(m)]): the sum's shape is decided by the data, so the Gradient node reading it is
    // planned after the count is read back.
    GraphBuilder b("staged", 17);
    Value x = b.input("x", DType::f32, Shape{3, 5}), m = b.input("m", DType::f32, Shape{7});
    Value idx = b.op1("Reshape", {b.op1("NonZero", {m}), ints(b, "flat", {-1})});
    Value s = b.op1("ReduceSum", {b.op1("Gather", {m, idx})}, {{"keepdims", int64_t(0)}});
    Value y = b.op1("Mul", {b.op1("Tanh", {x}), s});
    auto d = b.op("Gradient", {x}, {{"xs", std::vector<std::string>{"x"}}, {"y", y.name}}, 1, kTraining);
    b.graph().opsets[kTraining] = 1;
    b.output(d[0], "dx");
    auto model = Model::create(test::shared_ctx(), b.build());
    HostTensor xv = test::random_tensor(Shape{3, 5}, 1);
    HostTensor mv = HostTensor::from<float>(Shape{7}, std::vector<float>{0, 2, 0, 0.5f, 0, 0, -1});
    auto out = model->session()->run({{"x", xv}, {"m", mv}});
    for (int k = 0; k < 15; ++k) {
      const double t = std::tanh(double(xv.as<float>()[k]));
      CHECK(out.at("dx").as<float>()[k] == doctest::Approx((1 - t * t) * 1.5).epsilon(1e-5));
    }
  }

  TEST_CASE("errors name the op, its node and the Gradient node") {
    auto load = [](const char* op, std::vector<std::string> xs) {
      GraphBuilder b("errors", 17);
      Value x = b.input("x", DType::f32, Shape{3, 5});
      Value y = b.op1("Tanh", {b.op1(op, {x})});
      auto d = b.op("Gradient", {x}, {{"xs", xs}, {"y", y.name}}, 1, kTraining);
      b.graph().nodes.back().name = "grad";
      b.graph().opsets[kTraining] = 1;
      b.output(d[0], "dx");
      return test::error_of([&] { Model::create(test::shared_ctx(), b.build()); });
    };
    std::string e = load("Sin", {"x"});
    CHECK(e.find("node 'grad' (ai.onnx.preview.training.Gradient)") != std::string::npos);
    CHECK(e.find("node 'Sin_0' (Sin)") != std::string::npos);
    CHECK(e.find("op 'Sin' has no backward rule") != std::string::npos);
    CHECK(e.find("MatMul") != std::string::npos);  // the list of ops it differentiates
    e = load("Neg", {"nope"});
    CHECK(
        e.find("node 'grad' (ai.onnx.preview.training.Gradient): xs names 'nope', which is not a value of the graph") !=
        std::string::npos);
    // Every rule the header lists has a test above (LSTM, GRU, LSTMTrain, GRUTrain: suite "autodiff rnn" below;
    // Attention and Where: "autodiff attention").
    CHECK(differentiable_ops().size() == 58);
  }
}

// LSTM and GRU (linear_before_reset 1 and 0) backward through time (RNNGrad, models/ops_rnn_backward.cpp) from the
// states LSTMTrain / GRUTrain save: hidden 7, input 5, T 1 and 5, batch 1 and 3, each direction, with and without
// initial states, y made of
// Y only, Y_h only, or Y, Y_h and Y_c (Y + Y_h * Y_c: Y_h and Y_c broadcast over T). Weights in [-0.5, 0.5].
namespace {

struct RnnCase {
  const char* op;  // LSTM or GRU
  const char* direction;
  int64_t T, B;
  bool initial;
  const char* from;  // "Y", "Y_h", "all"
  int64_t layout = 0;
  bool weights_constant = false;  // W, R, B initializers: the rule recomputes the states (a plain LSTM / GRU)
  int64_t linear_before_reset = 1;  // GRU
};

void check_rnn(const RnnCase& c) {
  const std::string what = fmt::format("{} {} T={} B={} initial {} from {} layout {} linear_before_reset {}", c.op,
                                       c.direction, c.T, c.B, c.initial, c.from, c.layout, c.linear_before_reset);
  CAPTURE(what);
  const bool lstm = std::string(c.op) == "LSTM";
  const int64_t D = std::string(c.direction) == "bidirectional" ? 2 : 1, H = 7, I = 5, G = (lstm ? 4 : 3) * H;
  const Shape x = c.layout ? Shape{c.B, c.T, I} : Shape{c.T, c.B, I}, state = c.layout ? Shape{c.B, D, H} : Shape{D, c.B, H};
  std::vector<Input> inputs{{"x", x}};
  const std::vector<std::pair<std::string, Shape>> weights{{"w", {D, G, I}}, {"r", {D, G, H}}, {"bias", {D, 2 * G}}};
  if (!c.weights_constant)
    for (auto& [name, shape] : weights) inputs.push_back({name, shape, -0.5f, 0.5f});
  if (c.initial) {
    inputs.push_back({"h0", state});
    if (lstm) inputs.push_back({"c0", state});
  }
  const std::string from = c.from;
  check_gradients(inputs, [&](GraphBuilder& b, std::map<std::string, Value>& in) {
    std::vector<Value> args{in["x"]};
    uint32_t seed = 40;
    for (auto& [name, shape] : weights)
      args.push_back(c.weights_constant ? b.constant(name, test::random_tensor(shape, seed++, -0.5f, 0.5f)) : in[name]);
    args.push_back(Value{});  // sequence_lens
    if (c.initial) {
      args.push_back(in["h0"]);
      if (lstm) args.push_back(in["c0"]);
    }
    std::map<std::string, AttrValue> attrs{{"hidden_size", H}, {"direction", std::string(c.direction)}};
    if (c.layout) attrs["layout"] = c.layout;
    if (!lstm) attrs["linear_before_reset"] = c.linear_before_reset;
    auto out = b.op(c.op, args, attrs, lstm ? 3 : 2);
    if (from == "Y") return out[0];
    if (from == "Y_h") return out[1];
    // Y_h and Y_c ([D, B, H] or [B, D, H]) broadcast against Y ([T, D, B, H] or [B, T, D, H]).
    Value hc = lstm ? b.op1("Mul", {out[1], out[2]}) : out[1];
    if (c.layout) hc = b.op1("Unsqueeze", {hc, ints(b, "axes", {1})});
    return b.op1("Add", {out[0], hc});
  }, 14);
}

}  // namespace

TEST_SUITE("autodiff rnn") {
  TEST_CASE("LSTM backward through time") {
    SUBCASE("forward T=5 B=3 initial states, from Y") { check_rnn({"LSTM", "forward", 5, 3, true, "Y"}); }
    SUBCASE("reverse T=1 B=1, from Y_h") { check_rnn({"LSTM", "reverse", 1, 1, false, "Y_h"}); }
    SUBCASE("reverse T=5 B=3 initial states, from Y, Y_h, Y_c") { check_rnn({"LSTM", "reverse", 5, 3, true, "all"}); }
    SUBCASE("bidirectional T=5 B=1 initial states, from Y, Y_h, Y_c") { check_rnn({"LSTM", "bidirectional", 5, 1, true, "all"}); }
    SUBCASE("bidirectional T=1 B=3, from Y") { check_rnn({"LSTM", "bidirectional", 1, 3, false, "Y"}); }
    SUBCASE("forward T=5 B=3 layout 1, from Y_h") { check_rnn({"LSTM", "forward", 5, 3, false, "Y_h", 1}); }
    SUBCASE("bidirectional T=5 B=3 layout 1 initial states, from all") {
      check_rnn({"LSTM", "bidirectional", 5, 3, true, "all", 1});
    }
    SUBCASE("constant weights (states recomputed), from all") {
      check_rnn({"LSTM", "bidirectional", 5, 3, true, "all", 0, true});
    }
  }
  TEST_CASE("GRU (linear_before_reset) backward through time") {
    SUBCASE("forward T=5 B=3 initial states, from Y and Y_h") { check_rnn({"GRU", "forward", 5, 3, true, "all"}); }
    SUBCASE("reverse T=5 B=1 initial states, from Y_h") { check_rnn({"GRU", "reverse", 5, 1, true, "Y_h"}); }
    SUBCASE("bidirectional T=1 B=3, from Y") { check_rnn({"GRU", "bidirectional", 1, 3, false, "Y"}); }
    SUBCASE("bidirectional T=5 B=3 layout 1 initial states, from Y") {
      check_rnn({"GRU", "bidirectional", 5, 3, true, "Y", 1});
    }
    SUBCASE("constant weights (states recomputed), from Y_h") {
      check_rnn({"GRU", "forward", 5, 3, true, "Y_h", 0, true});
    }
  }
  TEST_CASE("GRU without linear_before_reset backward through time") {
    SUBCASE("forward T=5 B=3 initial states, from Y and Y_h") { check_rnn({"GRU", "forward", 5, 3, true, "all", 0, false, 0}); }
    SUBCASE("reverse T=1 B=1, from Y_h") { check_rnn({"GRU", "reverse", 1, 1, false, "Y_h", 0, false, 0}); }
    SUBCASE("bidirectional T=5 B=3 layout 1 initial states, from Y") {
      check_rnn({"GRU", "bidirectional", 5, 3, true, "Y", 1, false, 0});
    }
    SUBCASE("constant weights (states recomputed), from Y_h") {
      check_rnn({"GRU", "forward", 5, 3, true, "Y_h", 0, true, 0});
    }
  }
}

// ONNX Attention (opset 23; AttentionTrain + AttentionGrad, flash-style): dQ, dK, dV against finite differences on
// odd sizes; the PyTorch comparisons are in tests/test_attention_backward.cpp.
namespace {

struct AttentionCase {
  int64_t B, Sq, Skv, Hq, Hkv, D, Dv;
  bool three_d, causal;
  int mask;  // 0 none, 1 additive [Sq, Skv] (some -inf), 2 boolean [B, 1, Sq, Skv]
  float scale = 0.0f;
};

void check_attention(const AttentionCase& c) {
  const Shape sq = c.three_d ? Shape{c.B, c.Sq, c.Hq * c.D} : Shape{c.B, c.Hq, c.Sq, c.D};
  const Shape sk = c.three_d ? Shape{c.B, c.Skv, c.Hkv * c.D} : Shape{c.B, c.Hkv, c.Skv, c.D};
  const Shape sv = c.three_d ? Shape{c.B, c.Skv, c.Hkv * c.Dv} : Shape{c.B, c.Hkv, c.Skv, c.Dv};
  check_gradients({{"q", sq, -1.5f, 1.5f}, {"k", sk, -1.5f, 1.5f}, {"v", sv}}, [&](GraphBuilder& b, auto& in) {
    std::vector<Value> ins{in["q"], in["k"], in["v"]};
    if (c.mask == 1) {
      HostTensor m = test::random_tensor(Shape{c.Sq, c.Skv}, 5, -1.0f, 1.0f);
      for (int64_t i = 0; i < m.numel(); ++i)
        if (i % c.Skv != 0 && i % 3 == 1) m.as<float>()[i] = -INFINITY;
      ins.push_back(b.constant("mask", m));
    } else if (c.mask == 2) {
      HostTensor m(DType::boolean, Shape{c.B, 1, c.Sq, c.Skv});
      auto* keep = static_cast<uint8_t*>(m.data());
      for (int64_t i = 0; i < m.numel(); ++i) keep[i] = i % c.Skv == 0 || i % 4 != 2;
      ins.push_back(b.constant("mask", m));
    }
    std::map<std::string, AttrValue> attrs{{"is_causal", int64_t(c.causal)}};
    if (c.three_d) attrs["q_num_heads"] = c.Hq, attrs["kv_num_heads"] = c.Hkv;
    if (c.scale != 0.0f) attrs["scale"] = c.scale;
    return b.op1("Attention", ins, attrs);
  }, 23);
}

}  // namespace

TEST_SUITE("autodiff attention") {
  TEST_CASE("Attention: dQ, dK, dV (flash-style backward) against finite differences") {
    SUBCASE("4-D, S 1, batch 1") { check_attention({1, 1, 1, 2, 2, 16, 16, false, false, 0}); }
    SUBCASE("3-D, S 7, D 24, causal, batch 3") { check_attention({3, 7, 7, 2, 2, 24, 24, true, false, 0}); }
    SUBCASE("4-D, Sq 5, Skv 9, Dv 7, additive mask with -inf, scale 0.4") {
      check_attention({1, 5, 9, 1, 1, 6, 7, false, false, 1, 0.4f});
    }
    SUBCASE("4-D, boolean mask, batch 3") { check_attention({3, 6, 6, 2, 2, 5, 5, false, false, 2}); }
    SUBCASE("3-D, grouped-query heads 4 / 2, causal") { check_attention({1, 5, 5, 4, 2, 8, 8, true, false, 0}); }
  }
  TEST_CASE("Where: X and Y broadcast, a constant condition") {
    HostTensor cond(DType::boolean, Shape{3, 4, 5});
    auto* c = static_cast<uint8_t*>(cond.data());
    for (int64_t i = 0; i < cond.numel(); ++i) c[i] = (i * 7) % 3 != 0;
    check_gradients({{"a", Shape{3, 1, 5}}, {"b", Shape{5}}}, [&](GraphBuilder& b, auto& in) {
      return b.op1("Where", {b.constant("cond", cond), in["a"], in["b"]});
    });
  }
  // Attention as torch.onnx writes it below opset 23 (tools/bench/train_gpt_vs_torch.py's TrainGpt without the
  // custom symbolic): heads split by Reshape + Transpose, MatMul, a scale, masked_fill (Where with -inf), Softmax,
  // MatMul, the heads merged back.
  TEST_CASE("unfused attention: Reshape, Transpose, MatMul, Mul, Where, Softmax") {
    const int64_t B = 2, T = 5, H = 2, D = 3;
    HostTensor keep(DType::boolean, Shape{T, T});
    auto* k = static_cast<uint8_t*>(keep.data());
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) k[i * T + j] = j <= i;
    check_gradients({{"q", Shape{B, T, H * D}}, {"k", Shape{B, T, H * D}}, {"v", Shape{B, T, H * D}}},
                    [&](GraphBuilder& b, auto& in) {
      auto heads = [&](Value x) {
        return b.op1("Transpose", {b.op1("Reshape", {x, ints(b, x.name + "_shape", {B, T, H, D})})},
                     {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
      };
      Value q = heads(in["q"]), kt = b.op1("Transpose", {heads(in["k"])}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}});
      Value s = b.op1("Mul", {b.op1("MatMul", {q, kt}), b.constant("scale", HostTensor::from<float>(Shape{}, std::vector<float>{0.577f}))});
      HostTensor ninf = HostTensor::from<float>(Shape{}, std::vector<float>{-INFINITY});
      Value p = b.op1("Softmax", {b.op1("Where", {b.constant("keep", keep), s, b.constant("ninf", ninf)})}, {{"axis", int64_t(-1)}});
      Value o = b.op1("Transpose", {b.op1("MatMul", {p, heads(in["v"])})}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
      return b.op1("Reshape", {o, ints(b, "out_shape", {B, T, H * D})});
    });
  }
}
