// Selection and scan ops against tests/reference/select_ref.cpp: TopK (largest / smallest, every axis,
// k = 0 and k = the whole axis, ties to the lower index, NaN, f64 / integer types, host fold), ReverseSequence
// (time-major and batch-major, lengths 0 and full, i64 data), CumProd (exclusive / reverse, every axis, i32
// wrapping), Compress (with and without axis, nothing selected, host fold), EyeLike and Unique (folded at
// load) and the errors that name the node, the op and the argument. Odd shapes and batch 1 throughout.
// Tolerance: exact (selection moves values), CumProd f32 1e-5 relative.
#include <cmath>
#include <cstring>
#include <limits>

#include "layers/reduce.hpp"
#include "layers/select.hpp"
#include "models/builder.hpp"
#include "models/model.hpp"
#include "models/op_registry.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/select_ref.hpp"
#include "support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::test;

namespace {
std::vector<double> dbl(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Values with many ties: small integers as floats.
std::vector<float> tied_floats(size_t n, uint32_t seed) {
  auto v = random_ints<int>(n, -3, 3, seed);
  return {v.begin(), v.end()};
}

void run_topk(const Shape& s, int64_t k, int axis, bool largest, const std::vector<float>& x, int kernel) {
  CAPTURE(s.str());
  CAPTURE(k);
  CAPTURE(axis);
  CAPTURE(largest);
  CAPTURE(kernel);
  TopKConfig cfg{s, DType::f32, k, axis, largest, kernel};
  auto op = TopK::create(ctx(), 0, cfg);
  const Shape os = TopK::validate(cfg);
  Tensor y = ctx().alloc(os, DType::f32), yi = ctx().alloc(os, DType::i64);
  auto ec = ctx().exec();
  Tensor outs[] = {y, yi};
  Tensor ins[] = {up(x, s)};
  Tensor ws;
  if (op->workspace_bytes()) ws = ctx().alloc(Shape{int64_t(op->workspace_bytes())}, DType::u8);
  op->enqueue(ins, outs, op->workspace_bytes() ? &ws : nullptr, ec);
  ctx().finish();
  std::vector<double> want;
  std::vector<int64_t> want_i;
  const int a = axis < 0 ? axis + int(s.rank()) : axis;
  ref::topk(dbl(x), s.dims, k, a, largest, want, want_i);
  auto got = down<float>(y);
  auto got_i = down<int64_t>(yi);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got_i[i] == want_i[i]);
    if (std::isnan(want[i])) REQUIRE(std::isnan(got[i]));
    else REQUIRE(double(got[i]) == want[i]);
  }
}

// Every kernel (rank count per element, insertion per line, merge sort per line) and the automatic choice.
void run_topk(const Shape& s, int64_t k, int axis, bool largest, const std::vector<float>& x) {
  for (int kernel : {-1, 0, 1, 2}) run_topk(s, k, axis, largest, x, kernel);
}
}  // namespace

TEST_SUITE("select") {

TEST_CASE("TopK: largest and smallest on every axis, odd shapes, batch 1, ties to the lower index") {
  run_topk(Shape{1, 7}, 3, -1, true, random_floats(7, 1));
  run_topk(Shape{1, 7}, 7, 1, false, random_floats(7, 2));
  run_topk(Shape{3, 5, 4}, 2, 1, true, tied_floats(60, 3));
  run_topk(Shape{3, 5, 4}, 5, 1, false, tied_floats(60, 4));
  run_topk(Shape{6, 3, 2}, 1, 0, false, tied_floats(36, 5));
  run_topk(Shape{2, 3, 37}, 11, 2, true, tied_floats(222, 6));
  run_topk(Shape{2, 3, 37}, 0, 2, true, tied_floats(222, 7));  // k = 0: empty outputs
  run_topk(Shape{1}, 1, 0, true, {0.5f});
  auto x = random_floats(13, 8);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[9] = std::numeric_limits<float>::infinity();
  run_topk(Shape{13}, 4, 0, true, x);  // NaN first, then inf
  run_topk(Shape{13}, 13, 0, false, x);  // NaN last
  // A small k against the line: the automatic choice inserts per line.
  CHECK(TopK::create(ctx(), 0, {Shape{2, 3001}, DType::f32, 7, 1, true})->algorithm() == "insertion per line");
  CHECK(TopK::create(ctx(), 0, {Shape{2, 30}, DType::f32, 7, 1, true})->algorithm() == "rank count per element");
  // A large k against a long line: on a CPU the merge sort (SSDlite's per-class top 300 of 3234 boxes);
  // elsewhere rank counts, whose work-items run in parallel.
  CHECK(TopK::create(ctx(), 0, {Shape{1, 3234}, DType::f32, 300, 1, true})->algorithm() ==
        (ctx().device(0).info.type == DeviceType::cpu ? "merge sort per line" : "rank count per element"));
  run_topk(Shape{2, 3001}, 7, 1, true, tied_floats(6002, 10));
  run_topk(Shape{3001, 2}, 50, 0, false, random_floats(6002, 11));
  // Long lines with many ties and a NaN, k a large part of the line, a run count that is not a power of 2.
  auto t = tied_floats(2 * 1027, 12);
  t[700] = std::numeric_limits<float>::quiet_NaN();
  run_topk(Shape{1027, 2}, 600, 0, true, t);
  run_topk(Shape{2, 1027}, 1027, 1, false, t);
}

TEST_CASE("TopK on integer types keeps every bit, and f64") {
  const Shape s{4, 9};
  std::vector<uint64_t> u = random_ints<uint64_t>(36, 0, std::numeric_limits<uint64_t>::max(), 9);
  u[5] = u[2];  // a tie
  for (int kernel : {0, 1, 2}) {
    CAPTURE(kernel);
    TopKConfig cfg{s, DType::u64, 4, 1, true, kernel};
    auto op = TopK::create(ctx(), 0, cfg);
    const Shape os{4, 4};
    Tensor y = ctx().alloc(os, DType::u64), yi = ctx().alloc(os, DType::i64);
    auto ec = ctx().exec();
    Tensor outs[] = {y, yi};
    Tensor ins[] = {up(u, s)};
    Tensor ws;
    if (op->workspace_bytes()) ws = ctx().alloc(Shape{int64_t(op->workspace_bytes())}, DType::u8);
    op->enqueue(ins, outs, op->workspace_bytes() ? &ws : nullptr, ec);
    ctx().finish();
    auto got = down<uint64_t>(y);
    auto got_i = down<int64_t>(yi);
    for (int64_t r = 0; r < 4; ++r) {  // reference: a stable sort of each row by value, descending
      std::vector<int64_t> order(9);
      for (int64_t j = 0; j < 9; ++j) order[size_t(j)] = j;
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return u[size_t(r * 9 + a)] > u[size_t(r * 9 + b)]; });
      for (int64_t j = 0; j < 4; ++j) {
        REQUIRE(got_i[size_t(r * 4 + j)] == order[size_t(j)]);
        REQUIRE(got[size_t(r * 4 + j)] == u[size_t(r * 9 + order[size_t(j)])]);
      }
    }
  }
  if (supports_dtype(ctx().device(0).info, DType::f64)) {  // values that differ beyond f32
    std::vector<double> d(36);
    for (size_t i = 0; i < d.size(); ++i) d[i] = 1.0 + 1e-12 * double((i * 7) % 36);
    auto op = TopK::create(ctx(), 0, {s, DType::f64, 3, 1, false});
    Tensor y = ctx().alloc(Shape{4, 3}, DType::f64), yi = ctx().alloc(Shape{4, 3}, DType::i64);
    auto ec = ctx().exec();
    Tensor outs[] = {y, yi};
    Tensor ins[] = {up(d, s)};
    op->enqueue(ins, outs, nullptr, ec);
    ctx().finish();
    std::vector<double> want;
    std::vector<int64_t> want_i;
    ref::topk(d, s.dims, 3, 1, false, want, want_i);
    CHECK(down<double>(y) == want);
    CHECK(down<int64_t>(yi) == want_i);
  }
  expect_invalid([] { TopK::validate({Shape{3, 4}, DType::f32, 5, 1, true}); }, {"TopK", "k = 5", "4"});
  expect_invalid([] { TopK::validate({Shape{3, 4}, DType::f32, 2, 2, true}); }, {"TopK", "axis"});
  expect_invalid([] { TopK::validate({Shape{3, 4}, DType::boolean, 2, 1, true}); }, {"TopK", "bool"});
}

TEST_CASE("ReverseSequence: time-major and batch-major, lengths 0 .. full, odd inner sizes") {
  struct Case { Shape s; int time, batch; std::vector<int64_t> lens; };
  for (const Case& c : {Case{Shape{5, 3, 2}, 0, 1, {5, 2, 0}}, Case{Shape{3, 4}, 1, 0, {1, 4, 3}},
                        Case{Shape{1, 7, 3}, 0, 1, {1, 1, 1, 0, 1, 0, 1}}, Case{Shape{2, 6, 5, 3}, 1, 0, {6, 3}}}) {
    CAPTURE(c.s.str());
    auto x = random_floats(size_t(c.s.numel()), 11);
    auto op = ReverseSequence::create(ctx(), 0, {c.s, DType::f32, c.time, c.batch});
    auto got = down<float>(run_op(*op, {up(x, c.s), up(c.lens, Shape{int64_t(c.lens.size())})}, c.s));
    auto want = ref::reverse_sequence(dbl(x), c.s.dims, c.lens, c.time, c.batch);
    for (size_t i = 0; i < want.size(); ++i) REQUIRE(double(got[i]) == want[i]);
  }
  const Shape s{4, 2, 3};
  auto xi = random_ints<int64_t>(24, -1000, 1000, 12);
  auto op = ReverseSequence::create(ctx(), 0, {s, DType::i64, 0, 1});
  std::vector<int64_t> lens = {3, 4};
  auto got = down<int64_t>(run_op(*op, {up(xi, s), up(lens, Shape{2})}, s, DType::i64));
  std::vector<double> xd(xi.begin(), xi.end());
  auto want = ref::reverse_sequence(xd, s.dims, lens, 0, 1);
  for (size_t i = 0; i < want.size(); ++i) REQUIRE(double(got[i]) == want[i]);
  expect_invalid([] { ReverseSequence::validate({Shape{3, 4}, DType::f32, 1, 1}); }, {"ReverseSequence", "differ"});
  expect_invalid([] { ReverseSequence::validate({Shape{3, 4}, DType::f32, 2, 0}); },
                 {"ReverseSequence", "time_axis", "2"});
  expect_invalid([] { ReverseSequence::validate({Shape{3}, DType::f32, 0, 1}); }, {"ReverseSequence", "rank"});
}

TEST_CASE("CumProd: inclusive / exclusive, forward / reverse, every axis; i32 wraps") {
  for (const Shape& s : {Shape{7}, Shape{3, 5, 2}, Shape{1, 9}}) {
    for (int axis = 0; axis < int(s.rank()); ++axis)
      for (int mode = 0; mode < 4; ++mode) {
        const bool exclusive = mode & 1, reverse = mode & 2;
        CAPTURE(s.str());
        CAPTURE(axis);
        CAPTURE(mode);
        auto x = random_floats(size_t(s.numel()), 13, 0.5f, 1.5f);
        x[0] = -x[0];
        CumSumConfig cfg{s, DType::f32, axis - int(s.rank()), exclusive, reverse, true};
        auto op = CumSum::create(ctx(), 0, cfg);
        CHECK(op->type() == "CumProd");
        auto got = down<float>(run_op(*op, {up(x, s)}, s));
        auto want = ref::cumprod(dbl(x), s.dims, axis, exclusive, reverse);
        std::vector<float> w(want.begin(), want.end());
        CLDL_CHECK_CLOSE(got.data(), w.data(), w.size(), 1e-5, 1e-7);
      }
  }
  const Shape s{2, 40};
  auto xi = random_ints<int32_t>(80, -9, 9, 14);
  auto op = CumSum::create(ctx(), 0, {s, DType::i32, 1, false, false, true});
  auto got = down<int32_t>(run_op(*op, {up(xi, s)}, s, DType::i32));
  for (int r = 0; r < 2; ++r) {
    uint32_t p = 1;  // two's-complement wrap
    for (int j = 0; j < 40; ++j) {
      p *= uint32_t(xi[size_t(r * 40 + j)]);
      REQUIRE(got[size_t(r * 40 + j)] == int32_t(p));
    }
  }
  expect_invalid([] { CumSum::validate({Shape{3}, DType::i8, 0, false, false, true}); }, {"CumProd", "i8"});
}

TEST_CASE("Compress: with an axis, without (flattened), nothing selected; the condition must be known at load") {
  using namespace graph;
  const Shape s{3, 5, 2};
  auto xv = random_floats(30, 15);
  struct Case { std::vector<bool> cond; int axis; };
  for (const Case& c : {Case{{true, false, true, true, false}, 1}, Case{{false, true}, 0}, Case{{false, true}, -1},
                        Case{{false, false, true, true, false, false, true}, -2}, Case{{false, false}, 2}}) {
    CAPTURE(c.axis);
    for (bool const_data : {false, true}) {
      CAPTURE(const_data);
      GraphBuilder b("compress", 11);
      HostTensor cond(DType::boolean, Shape{int64_t(c.cond.size())});
      for (size_t i = 0; i < c.cond.size(); ++i) static_cast<uint8_t*>(cond.data())[i] = c.cond[i];
      auto x = const_data ? b.constant("x", HostTensor::from<float>(s, xv)) : b.input("x", DType::f32, s);
      auto k = b.constant("cond", cond);
      std::map<std::string, AttrValue> attrs;
      if (c.axis != -2) attrs["axis"] = int64_t(c.axis);
      b.output(b.op1("Compress", {x, k}, attrs), "y");
      auto u = b.input("u", DType::f32, Shape{1});
      b.output(b.op1("Identity", {u}), "z");
      std::map<std::string, HostTensor> feed{{"u", random_tensor(Shape{1}, 1)}};
      if (!const_data) feed["x"] = HostTensor::from<float>(s, xv);
      auto out = run_graph(b.build(), feed);
      ref::Dims od;
      const int ax = c.axis == -2 ? -1 : (c.axis < 0 ? c.axis + 3 : c.axis);
      auto want = ref::compress(dbl(xv), s.dims, c.cond, ax, od);
      const HostTensor& y = out.at("y");
      REQUIRE(y.shape() == Shape(od));
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(double(y.as<float>()[i]) == want[i]);
    }
  }
  GraphBuilder b("compress_runtime", 11);
  auto x = b.input("x", DType::f32, s);
  auto k = b.input("cond", DType::boolean, Shape{3});
  b.output(b.op1("Compress", {x, k}, {{"axis", int64_t(0)}}), "y");
  auto m = error_of([&] { compile_graph(b.build()); });
  // A run-time condition is a NonZero of it (a counted output) and a Gather: a Model plans past it
  // (tests/test_data_dependent.cpp), a bare compile cannot, and says so naming the node.
  CHECK(m.find("Compress") != std::string::npos);
  CHECK(m.find("decided by run-time data") != std::string::npos);
  GraphBuilder b2("compress_far", 11);
  auto x2 = b2.input("x", DType::f32, Shape{2, 2});
  HostTensor far(DType::boolean, Shape{4});
  static_cast<uint8_t*>(far.data())[3] = 1;
  b2.output(b2.op1("Compress", {x2, b2.constant("c", far)}, {{"axis", int64_t(1)}}), "y");
  m = error_of([&] { compile_graph(b2.build()); });
  CHECK(m.find("position 3") != std::string::npos);
}

TEST_CASE("EyeLike folds at load: diagonals k, dtype attribute, non-square") {
  using namespace graph;
  for (auto [rows, cols, k] : {std::tuple{3, 4, 0}, std::tuple{4, 3, -1}, std::tuple{1, 5, 2}, std::tuple{3, 3, 5}}) {
    CAPTURE(rows);
    CAPTURE(k);
    GraphBuilder b("eye", 9);
    auto x = b.input("x", DType::i32, Shape{rows, cols});
    b.output(b.op1("EyeLike", {x}, {{"k", int64_t(k)}}), "y");
    b.output(b.op1("EyeLike", {x}, {{"k", int64_t(k)}, {"dtype", int64_t(1)}}), "yf");
    auto out = run_graph(b.build(), {{"x", HostTensor(DType::i32, Shape{rows, cols})}});
    REQUIRE(out.at("y").dtype() == DType::i32);
    REQUIRE(out.at("yf").dtype() == DType::f32);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) {
        CHECK(out.at("y").as<int32_t>()[i * cols + j] == (j - i == k ? 1 : 0));
        CHECK(out.at("yf").as<float>()[i * cols + j] == (j - i == k ? 1.0f : 0.0f));
      }
  }
  GraphBuilder b("eye3", 9);
  auto x = b.input("x", DType::f32, Shape{2, 2, 2});
  b.output(b.op1("EyeLike", {x}), "y");
  auto m = error_of([&] { compile_graph(b.build()); });
  CHECK(m.find("EyeLike") != std::string::npos);
  CHECK(m.find("2-D") != std::string::npos);
}

TEST_CASE("Unique folds a constant input: sorted and in order of appearance; a runtime input needs a Model") {
  using namespace graph;
  auto xv = tied_floats(23, 16);
  for (bool sorted : {true, false}) {
    CAPTURE(sorted);
    GraphBuilder b("unique", 11);
    auto x = b.constant("x", HostTensor::from<float>(Shape{23}, xv));
    auto outs = b.op("Unique", {x}, {{"sorted", int64_t(sorted)}}, 4);
    const char* names[] = {"y", "first", "inverse", "counts"};
    for (int i = 0; i < 4; ++i) b.output(outs[size_t(i)], names[i]);
    auto u = b.input("u", DType::f32, Shape{1});
    b.output(b.op1("Identity", {u}), "z");
    auto out = run_graph(b.build(), {{"u", random_tensor(Shape{1}, 1)}});
    std::vector<double> y;
    std::vector<int64_t> first, inverse, counts;
    ref::unique(dbl(xv), sorted, y, first, inverse, counts);
    auto ints = [&](const char* n) {
      const HostTensor& t = out.at(n);
      return std::vector<int64_t>(t.as<int64_t>(), t.as<int64_t>() + t.numel());
    };
    REQUIRE(out.at("y").numel() == int64_t(y.size()));
    for (size_t i = 0; i < y.size(); ++i) CHECK(double(out.at("y").as<float>()[i]) == y[i]);
    CHECK(ints("first") == first);
    CHECK(ints("inverse") == inverse);
    CHECK(ints("counts") == counts);
  }
  GraphBuilder b("unique_runtime", 11);
  auto x = b.input("x", DType::f32, Shape{3});
  b.output(b.op("Unique", {x}, {}, 1)[0], "y");
  auto m = error_of([&] { compile_graph(b.build()); });
  CHECK(m.find("Unique") != std::string::npos);
  CHECK(m.find("decided by run-time data") != std::string::npos);
}

TEST_CASE("Unique on run-time data: a host step with counted outputs, any size, one session over sizes and values") {
  using namespace graph;
  for (bool sorted : {true, false}) {
    CAPTURE(sorted);
    GraphBuilder b("unique_runtime", 11);
    auto x = b.input("x", DType::f32, test::sym_shape({-1}, {"n"}));
    auto outs = b.op("Unique", {b.op1("Relu", {x})}, {{"sorted", int64_t(sorted)}}, 4);  // run-time data
    const char* names[] = {"y", "first", "inverse", "counts"};
    for (int i = 0; i < 4; ++i) b.output(outs[size_t(i)], names[i]);
    auto model = Model::create(test::shared_ctx(), b.build());
    auto session = model->session();
    // 5 000 and 9 001 elements (past the 4 096 a value-staged decision reads), one element, all equal.
    for (size_t n : {size_t(5000), size_t(1), size_t(9001), size_t(7)}) {
      CAPTURE(n);
      std::vector<float> xv = n == 7 ? std::vector<float>(7, 2.0f) : tied_floats(n, uint32_t(n));
      auto out = session->run({{"x", HostTensor::from<float>(Shape{int64_t(n)}, xv)}});
      std::vector<double> relu;
      for (float v : xv) relu.push_back(std::max(double(v), 0.0));
      std::vector<double> y;
      std::vector<int64_t> first, inverse, counts;
      ref::unique(relu, sorted, y, first, inverse, counts);
      auto ints = [&](const char* name) {
        const HostTensor& t = out.at(name);
        return std::vector<int64_t>(t.as<int64_t>(), t.as<int64_t>() + t.numel());
      };
      REQUIRE(out.at("y").shape() == Shape{int64_t(y.size())});
      for (size_t i = 0; i < y.size(); ++i) CHECK(double(out.at("y").as<float>()[i]) == y[i]);
      CHECK(ints("first") == first);
      CHECK(ints("inverse") == inverse);
      CHECK(ints("counts") == counts);
    }
  }
}

TEST_CASE("TopK in a graph: K an input known at load, host fold of constant data, opset-1 k attribute") {
  using namespace graph;
  const Shape s{3, 8};
  auto xv = tied_floats(24, 17);
  for (bool const_data : {false, true})
    for (int64_t opset : {int64_t(1), int64_t(11)}) {
      CAPTURE(const_data);
      CAPTURE(opset);
      GraphBuilder b("topk", opset);
      auto x = const_data ? b.constant("x", HostTensor::from<float>(s, xv)) : b.input("x", DType::f32, s);
      std::vector<Value> outs;
      if (opset == 1) {
        outs = b.op("TopK", {x}, {{"k", int64_t(3)}, {"axis", int64_t(1)}}, 2);
      } else {
        auto k = b.constant("k", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{3}));
        outs = b.op("TopK", {x, k}, {{"axis", int64_t(-1)}, {"largest", int64_t(0)}}, 2);
      }
      b.output(outs[0], "v");
      b.output(outs[1], "i");
      auto u = b.input("u", DType::f32, Shape{1});
      b.output(b.op1("Identity", {u}), "z");
      std::map<std::string, HostTensor> feed{{"u", random_tensor(Shape{1}, 1)}};
      if (!const_data) feed["x"] = HostTensor::from<float>(s, xv);
      auto out = run_graph(b.build(), feed);
      std::vector<double> want;
      std::vector<int64_t> want_i;
      ref::topk(dbl(xv), s.dims, 3, 1, opset == 1, want, want_i);
      REQUIRE(out.at("v").shape() == Shape{3, 3});
      for (size_t i = 0; i < want.size(); ++i) {
        CHECK(double(out.at("v").as<float>()[i]) == want[i]);
        CHECK(out.at("i").as<int64_t>()[i] == want_i[i]);
      }
    }
}

TEST_CASE("constant inputs of CumProd and ReverseSequence fold on the host to what the device computes") {
  using namespace graph;
  const Shape s{4, 3, 5};
  auto xf = random_floats(60, 81, 0.5f, 1.5f);
  auto xi = random_ints<int64_t>(60, -50, 50, 82);
  std::vector<int64_t> lens = {4, 0, 2}, axis = {-1};
  auto build = [&](bool constant) {
    GraphBuilder b(constant ? "folded" : "device", 26);
    auto in = [&](const char* name, HostTensor t) {
      return constant ? b.constant(name, std::move(t)) : b.input(name, t.dtype(), t.shape());
    };
    auto x = in("x", HostTensor::from<float>(s, xf));
    auto xl = in("xl", HostTensor::from<int64_t>(s, xi));
    auto l = in("l", HostTensor::from<int64_t>(Shape{3}, lens));
    auto a = b.constant("a", HostTensor::from<int64_t>(Shape{1}, axis));
    b.output(b.op1("CumProd", {x, a}, {{"exclusive", int64_t(1)}}), "cp");
    b.output(b.op1("CumProd", {xl, a}, {{"reverse", int64_t(1)}}), "cpi");
    b.output(b.op1("ReverseSequence", {x, l}, {{"time_axis", int64_t(0)}, {"batch_axis", int64_t(1)}}), "rs");
    if (constant) {
      auto z = b.input("z", DType::f32, Shape{1});
      b.output(b.op1("Identity", {z}), "zz");
    }
    return b.build();
  };
  check_folds_like_device(build,
                          {{"x", HostTensor::from<float>(s, xf)},
                           {"xl", HostTensor::from<int64_t>(s, xi)},
                           {"l", HostTensor::from<int64_t>(Shape{3}, lens)}},
                          {"cp", "cpi", "rs"}, 1e-5, 1e-7);
}

}  // TEST_SUITE
