// Control flow decided by run-time data: Loops and Scans of zero iterations (empty scan outputs, carried
// values unchanged, empty values feeding Concat / ReduceSum / Shape), lists built across a staged plan's
// boundaries (a trip count or a while condition computed from the data, appending to a list), an If on the
// data nested in a Loop body, and nodes whose outputs are empty. Against ONNX Runtime's outputs
// (tests/data/dynamic/make_control_flow.py) and values computed on the host.
#include <filesystem>
#include <random>

#include "models/model.hpp"
#include "models/npy.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

using test::sym_shape;

// Every output of `got` equal to `want` in dtype and shape, floats within tolerance, others exact.
void check_same(const std::string& name, const HostTensor& got, const HostTensor& want) {
  CAPTURE(name);
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  if (got.dtype() == DType::f32)
    CLDL_CHECK_CLOSE(got.as<float>(), want.as<float>(), size_t(want.numel()), 1e-5, 1e-6);
  else
    CHECK(std::memcmp(got.data(), want.data(), got.bytes()) == 0);
}

// One load and one session over every case k of tests/data/dynamic/<name>/: k_<input>.npy in,
// k_<output>.npy ONNX Runtime's (or NumPy's) outputs.
void check_cases(const std::string& name, size_t min_cases) {
  const std::string dir = std::string(CLDL_SOURCE_DIR) + "/tests/data/dynamic/";
  auto m = load_model(test::shared_ctx(), dir + name + ".onnx");
  auto s = m->session();
  size_t cases = 0;
  for (int k = 0;; ++k, ++cases) {
    std::map<std::string, HostTensor> feed;
    for (auto& in : m->graph().inputs) {
      const std::string path = fmt::format("{}{}/{}_{}.npy", dir, name, k, in.name);
      if (std::filesystem::exists(path)) feed[in.name] = read_npy(path);
    }
    if (feed.empty()) break;
    CAPTURE(name);
    CAPTURE(k);
    auto out = s->run(feed);
    for (auto& o : m->graph().outputs)
      check_same(o.name, out.at(o.name), read_npy(fmt::format("{}{}/{}_{}.npy", dir, name, k, o.name)));
  }
  CHECK(cases >= min_cases);
  MESSAGE(name << ": " << cases << " cases in one session, " << m->plan_cache_stats().misses << " plans");
}

ValueInfo unknown_value(const std::string& name, DType t = DType::f32) {
  ValueInfo v{name, t, ValueShape{}};
  v.shape.known = false;
  return v;
}

void add_node(Graph& g, const std::string& name, const std::string& op, std::vector<std::string> in,
              std::vector<std::string> out, std::map<std::string, AttrValue> attrs = {}) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  g.nodes.push_back(std::move(n));
}

HostTensor scalar_bool(bool v) {
  HostTensor t(DType::boolean, Shape{});
  *static_cast<uint8_t*>(t.data()) = v;
  return t;
}

}  // namespace

TEST_SUITE("control flow on run-time data") {
  TEST_CASE("Loops and Scans of zero iterations against ONNX Runtime and NumPy") {
    // loop_scan: a Loop whose trip count is computed from the data (staged) and one whose trip count is an
    // input, both with two scan outputs (f32 and i64), at trip counts 0, 1, 5, 0, 1 / 3; the scans meet a
    // Concat, a ReduceSum over the iterations and a Shape.
    check_cases("loop_scan", 5);
    // scan_zero: a Scan over 0, 1, 5 and 0 steps with scan outputs along axis 0 and (reversed) axis 1.
    check_cases("scan_zero", 4);
  }

  TEST_CASE("torch.jit.script exports: lists built across staged plans, an If in a Loop body, against ONNX Runtime") {
    // count_loop: a for over a count from the data (0, 1, 5, 2), a list that starts with the input,
    // torch.cat and torch.stack of it.
    check_cases("count_loop", 4);
    // while_list: a while on the data's sum appending to a list: 0, 1 and several iterations, each a stage
    // that the list so far crosses.
    check_cases("while_list", 5);
    // nested_if_loop: an if on the data (reading outer values) inside a for over a count from the data.
    check_cases("nested_if_loop", 6);
  }

  TEST_CASE("a sequence and an optional made before a stage boundary are the model's outputs") {
    // xs = []; opt = Optional(x); while sum(x) > 1: x = x * 0.5; xs.append(x). Every condition is run-time
    // data: each iteration ends a stage, the list so far crosses it. Outputs: the list, opt, the final x.
    auto body = std::make_shared<Graph>();
    body->name = "halve";
    body->inputs = {ValueInfo{"i", DType::i64, ValueShape(Shape{})}, ValueInfo{"c", DType::boolean, ValueShape(Shape{})},
                    unknown_value("xi"), unknown_value("list")};
    body->inputs.back().sequence = true;
    body->initializers["half"] = HostTensor::from<float>(Shape{}, std::vector<float>{0.5f});
    body->initializers["one"] = HostTensor::from<float>(Shape{}, std::vector<float>{1.0f});
    add_node(*body, "mul", "Mul", {"xi", "half"}, {"xn"});
    add_node(*body, "sum", "ReduceSum", {"xn"}, {"s"}, {{"keepdims", int64_t(0)}});
    add_node(*body, "more", "Greater", {"s", "one"}, {"c_out"});
    add_node(*body, "append", "SequenceInsert", {"list", "xn"}, {"list_out"});
    body->outputs = {ValueInfo{"c_out", DType::boolean, ValueShape(Shape{})}, unknown_value("xn"), unknown_value("list_out")};
    body->outputs.back().sequence = true;

    Graph g;
    g.name = "while_list_out";
    g.opsets[""] = 13;
    g.inputs = {ValueInfo{"x", DType::f32, sym_shape({-1}, {"n"})}};
    g.initializers["one0"] = HostTensor::from<float>(Shape{}, std::vector<float>{1.0f});
    add_node(g, "sum0", "ReduceSum", {"x"}, {"s0"}, {{"keepdims", int64_t(0)}});
    add_node(g, "more0", "Greater", {"s0", "one0"}, {"c0"});
    add_node(g, "empty", "SequenceEmpty", {}, {"list0"});
    add_node(g, "opt", "Optional", {"x"}, {"opt"});
    add_node(g, "loop", "Loop", {"", "c0", "x", "list0"}, {"x_final", "xs"}, {{"body", SubGraph(body)}});
    g.outputs = {unknown_value("xs"), unknown_value("opt"), ValueInfo{"x_final", DType::f32, sym_shape({-1}, {"n"})}};
    g.outputs[0].sequence = true;
    g.outputs[1].optional = true;
    g.sort();
    auto m = Model::create(test::shared_ctx(), std::move(g));
    auto s = m->session();
    for (std::vector<float> xv : {std::vector<float>{1, 2, 3, 4, 5}, std::vector<float>{0.2f, 0.3f},
                                  std::vector<float>{0.75f, 0.5f}, std::vector<float>{3, 0, 1}}) {
      CAPTURE(xv.size());
      const int64_t n = int64_t(xv.size());
      std::vector<std::vector<float>> items;
      std::vector<float> cur = xv;
      auto sum = [](const std::vector<float>& v) { double t = 0; for (float f : v) t += f; return t; };
      while (sum(cur) > 1) {
        for (auto& f : cur) f *= 0.5f;
        items.push_back(cur);
      }
      auto out = s->run_values({{"x", ModelValue::of(HostTensor::from<float>(Shape{n}, xv))}});
      REQUIRE(out.at("xs").kind == ModelValue::Kind::sequence);
      REQUIRE(out.at("xs").items.size() == items.size());  // {0.2, 0.3}: no iteration, an empty list
      for (size_t k = 0; k < items.size(); ++k) {
        REQUIRE(out.at("xs").items[k].shape() == Shape{n});
        CLDL_CHECK_CLOSE(out.at("xs").items[k].as<float>(), items[k].data(), items[k].size(), 0, 0);
      }
      REQUIRE(out.at("opt").kind == ModelValue::Kind::tensor);
      CLDL_CHECK_CLOSE(out.at("opt").tensor.as<float>(), xv.data(), xv.size(), 0, 0);
      REQUIRE(out.at("x_final").kind == ModelValue::Kind::tensor);
      CLDL_CHECK_CLOSE(out.at("x_final").tensor.as<float>(), cur.data(), cur.size(), 0, 0);
    }
    // run() takes tensors only, and says where to go.
    CHECK_THROWS_WITH(s->run({{"x", HostTensor::from<float>(Shape{1}, std::vector<float>{2})}}),
                      doctest::Contains("run_values"));
  }

  TEST_CASE("zero iterations of a body that cannot be inferred alone: its declared output type, else an error") {
    // for i in range(m): y = acc * 2 if sum(acc) > 0 else -acc; acc = y; scan y. The body's If decides on
    // data, so inferring one iteration for m = 0 stops there: the scan output takes the body's declared
    // [3] when it has one, and is an error naming the node and the output when it has none.
    for (bool declared : {true, false}) {
      CAPTURE(declared);
      auto branch = [](const std::string& name, const std::string& op, std::optional<float> k) {
        auto b = std::make_shared<Graph>();
        b->name = name;
        std::vector<std::string> in{"acc"};
        if (k) {
          b->initializers[name + "_k"] = HostTensor::from<float>(Shape{}, std::vector<float>{*k});
          in.push_back(name + "_k");
        }
        add_node(*b, name, op, in, {name + "_y"});
        b->outputs = {unknown_value(name + "_y")};
        return SubGraph(b);
      };
      auto body = std::make_shared<Graph>();
      body->name = "body";
      body->inputs = {ValueInfo{"i", DType::i64, ValueShape(Shape{})}, ValueInfo{"c", DType::boolean, ValueShape(Shape{})},
                      unknown_value("acc")};
      body->initializers["zero"] = HostTensor::from<float>(Shape{}, std::vector<float>{0});
      add_node(*body, "sum", "ReduceSum", {"acc"}, {"s"}, {{"keepdims", int64_t(0)}});
      add_node(*body, "pos", "Greater", {"s", "zero"}, {"p"});
      add_node(*body, "if", "If", {"p"}, {"y"}, {{"then_branch", branch("twice", "Mul", 2.f)}, {"else_branch", branch("neg", "Neg", {})}});
      add_node(*body, "scan", "Identity", {"y"}, {"y_scan"});
      body->outputs = {ValueInfo{"c", DType::boolean, ValueShape(Shape{})}, unknown_value("y"),
                       declared ? ValueInfo{"y_scan", DType::f32, ValueShape(Shape{3})} : unknown_value("y_scan")};
      Graph g;
      g.name = "zero_if";
      g.opsets[""] = 13;
      g.inputs = {ValueInfo{"x", DType::f32, ValueShape(Shape{3})}, ValueInfo{"m", DType::i64, ValueShape(Shape{})}};
      add_node(g, "loop", "Loop", {"m", "", "x"}, {"acc", "ys"}, {{"body", SubGraph(body)}});
      g.outputs = {unknown_value("acc"), unknown_value("ys")};
      auto mdl = Model::create(test::shared_ctx(), std::move(g));
      auto s = mdl->session();
      const std::vector<float> xv{0.5f, -2.f, 1.f};
      auto x = HostTensor::from<float>(Shape{3}, xv);
      auto m0 = HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{0});
      if (!declared) {
        CHECK_THROWS_WITH(s->run({{"x", x}, {"m", m0}}),
                          doctest::Contains("node 'loop' (Loop): zero iterations: the shape of scan output 'ys' is not known"));
        continue;
      }
      auto out = s->run({{"x", x}, {"m", m0}});
      CHECK(out.at("ys").shape() == Shape{0, 3});
      CLDL_CHECK_CLOSE(out.at("acc").as<float>(), xv.data(), 3, 0, 0);
      // Two iterations run through the staged If: -x (sum -0.5), then -(-x) * 2.
      out = s->run({{"x", x}, {"m", HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{2})}});
      REQUIRE(out.at("ys").shape() == Shape{2, 3});
      const std::vector<float> want{-0.5f, 2.f, -1.f, -1.f, 4.f, -2.f};
      CLDL_CHECK_CLOSE(out.at("ys").as<float>(), want.data(), 6, 0, 0);
    }
  }

  TEST_CASE("empty values on the device: a node whose outputs are empty runs nothing, empty parts join others") {
    // rows = x[2:2] ([0, 4]); MatMul(rows, w) is [0, 3] (no kernel: lowering a GEMM of M = 0 failed before);
    // Concat(rows, x, rows) is x; ReduceSum over the empty axis is zeros; Relu(rows) is empty.
    GraphBuilder b("empty_values", 13);
    auto x = b.input("x", DType::f32, sym_shape({-1, 4}, {"n", ""}));
    auto at = b.constant("at", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{2}));
    auto axis0 = b.constant("axis0", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{0}));
    std::vector<float> wv(12);
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = float(i) * 0.25f - 1;
    auto w = b.constant("w", HostTensor::from<float>(Shape{4, 3}, wv));
    auto rows = b.op1("Slice", {x, at, at, axis0});
    b.output(b.matmul(rows, w), "product");
    b.output(b.op1("Concat", {rows, x, rows}, {{"axis", int64_t(0)}}), "joined");
    b.output(b.op1("ReduceSum", {rows, axis0}, {{"keepdims", int64_t(0)}}), "sums");
    b.output(b.relu(rows), "relu");
    auto m = Model::create(test::shared_ctx(), b.build());
    auto s = m->session();
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int64_t n : {1, 3, 7}) {
      CAPTURE(n);
      HostTensor xv(DType::f32, Shape{n, 4});
      for (auto& v : xv.span<float>()) v = u(rng);
      auto out = s->run({{"x", xv}});
      CHECK(out.at("product").shape() == Shape{0, 3});
      CHECK(out.at("relu").shape() == Shape{0, 4});
      check_same("joined", out.at("joined"), xv);
      check_same("sums", out.at("sums"), HostTensor::from<float>(Shape{4}, std::vector<float>(4, 0.f)));
    }
    bool lowered_nothing = false;
    for (auto& line : s->last_plan()->describe())
      lowered_nothing = lowered_nothing || line.find("nothing to compute") != std::string::npos;
    CHECK(lowered_nothing);
  }
}
