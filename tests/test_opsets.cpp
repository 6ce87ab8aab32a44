// Opset version ranges (models/op_registry.hpp): an opset outside an op's range is an error naming the op,
// the opset and the range; older versions' forms that the conformance data does not cover (attributes that
// later opsets moved to inputs, Softmax's 2-D coercion, broadcast / axis before opset 7, PRelu's per-channel
// slope before 7) run against plain C++ references. 3-D Conv against a direct reference over odd shapes.
// docs/ops.md lists every registry op with its domain, opsets and family (its conformance column, which needs
// the conformance data, is checked by the conformance suite).
#include <cmath>
#include <fstream>
#include <sstream>

#include "tests/support/onnx_util.hpp"
#include "tests/support/ops_table.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {
const double kRtol = 1e-5, kAtol = 1e-6;

HostTensor rnd(Shape s, uint32_t seed) { return test::random_tensor(std::move(s), seed); }

// Softmax over `len` contiguous elements of each of `rows` rows (the 2-D coercion before opset 13).
std::vector<float> softmax_rows(const float* x, int64_t rows, int64_t len) {
  std::vector<float> y(size_t(rows * len));
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < len; ++i) m = std::max(m, double(x[r * len + i]));
    for (int64_t i = 0; i < len; ++i) s += std::exp(double(x[r * len + i]) - m);
    for (int64_t i = 0; i < len; ++i) y[size_t(r * len + i)] = float(std::exp(double(x[r * len + i]) - m) / s);
  }
  return y;
}
}  // namespace

TEST_SUITE("opsets") {
  TEST_CASE("an opset outside the op's range names the op, the opset and the range") {
    GraphBuilder b("old", 17);
    b.output(b.op1("Gelu", {b.input("x", DType::f32, Shape{2, 3})}), "y");
    Graph g = b.build();
    auto msg = test::error_of([&] { prepare(g); });
    CHECK(msg.find("unsupported opset 17 of op 'Gelu'") != std::string::npos);
    CHECK(msg.find("cldl implements opsets 20 and later of it") != std::string::npos);
    CHECK(msg.find("Gelu_0") != std::string::npos);
    // An op ONNX deprecated has an upper bound.
    GraphBuilder b10("deprecated", 10);
    b10.output(
        b10.op1("Upsample", {b10.input("x", DType::f32, Shape{1, 1, 2, 2}),
                             b10.constant("s", HostTensor::from<float>(Shape{4}, std::vector<float>{1, 1, 2, 2}))}),
        "y");
    Graph g10 = b10.build();
    msg = test::error_of([&] { prepare(g10); });
    CHECK(msg.find("unsupported opset 10 of op 'Upsample' (domain ai.onnx): cldl implements opsets 7 to 9 of it") !=
          std::string::npos);
  }

  TEST_CASE("Softmax / LogSoftmax / Hardmax before opset 13 coerce to 2-D at axis; from 13 one axis") {
    auto x = rnd({2, 3, 5}, 1);
    for (int64_t opset : {9, 11, 13}) {
      CAPTURE(opset);
      GraphBuilder b("softmax", opset);
      auto in = b.input("x", DType::f32, Shape{2, 3, 5});
      b.output(b.op1("Softmax", {in}, {{"axis", int64_t(1)}}), "y");
      b.output(b.op1("LogSoftmax", {in}, {{"axis", int64_t(1)}}), "l");
      b.output(b.op1("Hardmax", {in}, {{"axis", int64_t(1)}}), "h");
      auto out = test::run_graph(b.build(), {{"x", x}});
      std::vector<float> want(30);
      if (opset < 13) {
        want = softmax_rows(x.as<float>(), 2, 15);
      } else {  // along dim 1 only: gather each (n, l) column, softmax, scatter back
        for (int64_t n = 0; n < 2; ++n)
          for (int64_t l = 0; l < 5; ++l) {
            float col[3];
            for (int64_t c = 0; c < 3; ++c) col[c] = x.as<float>()[(n * 3 + c) * 5 + l];
            auto s = softmax_rows(col, 1, 3);
            for (int64_t c = 0; c < 3; ++c) want[size_t((n * 3 + c) * 5 + l)] = s[size_t(c)];
          }
      }
      REQUIRE(out["y"].shape() == Shape{2, 3, 5});
      CLDL_CHECK_CLOSE(out["y"].as<float>(), want.data(), want.size(), kRtol, kAtol);
      std::vector<float> logw(want.size());
      for (size_t i = 0; i < want.size(); ++i) logw[i] = std::log(want[i]);
      CLDL_CHECK_CLOSE(out["l"].as<float>(), logw.data(), logw.size(), 1e-4, 1e-5);
      // Hardmax: 1 where the softmax is largest in its row / column, else 0.
      const int64_t groups = opset < 13 ? 2 : 10;
      int ones = 0;
      for (size_t i = 0; i < 30; ++i) ones += out["h"].as<float>()[i] == 1.0f;
      CHECK(ones == groups);
    }
  }

  TEST_CASE("Slice before opset 10 and Pad before 11 take attributes") {
    auto x = rnd({4, 5}, 2);
    GraphBuilder b("attrs", 9);
    auto in = b.input("x", DType::f32, Shape{4, 5});
    b.output(b.op1("Slice", {in},
                   {{"starts", std::vector<int64_t>{1, -3}},
                    {"ends", std::vector<int64_t>{3, 100}},
                    {"axes", std::vector<int64_t>{0, 1}}}),
             "s");
    b.output(b.op1("Pad", {in}, {{"pads", std::vector<int64_t>{0, 1, 1, 2}}, {"value", 7.5f}}), "p");
    auto out = test::run_graph(b.build(), {{"x", x}});
    REQUIRE(out["s"].shape() == Shape{2, 3});
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < 3; ++c) CHECK(out["s"].as<float>()[r * 3 + c] == x.as<float>()[(r + 1) * 5 + c + 2]);
    REQUIRE(out["p"].shape() == Shape{5, 8});
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < 8; ++c) {
        bool inside = r < 4 && c >= 1 && c < 6;
        CHECK(out["p"].as<float>()[r * 8 + c] == (inside ? x.as<float>()[r * 5 + c - 1] : 7.5f));
      }
    // From opset 11 the pads are an input: the attribute form is not read.
    GraphBuilder b11("attrs11", 11);
    b11.output(b11.op1("Pad", {b11.input("x", DType::f32, Shape{4, 5})}, {{"pads", std::vector<int64_t>{0, 1, 1, 2}}}),
               "p");
    Graph g11 = b11.build();
    CHECK(test::error_of([&] { prepare(g11); }).find("pads") != std::string::npos);
  }

  TEST_CASE("before opset 7, Add broadcasts B onto A from axis only with broadcast = 1") {
    auto a = rnd({2, 3, 4}, 3), bv = rnd({3}, 4);
    GraphBuilder b("bcast", 6);
    auto in = b.input("a", DType::f32, Shape{2, 3, 4});
    b.output(b.op1("Add", {in, b.constant("b", bv)}, {{"broadcast", int64_t(1)}, {"axis", int64_t(1)}}), "y");
    auto out = test::run_graph(b.build(), {{"a", a}});
    REQUIRE(out["y"].shape() == Shape{2, 3, 4});
    for (int64_t i = 0; i < 24; ++i) CHECK(out["y"].as<float>()[i] == a.as<float>()[i] + bv.as<float>()[(i / 4) % 3]);
    // The same on constants, folded at load: Add(c [2, 3], d [2], axis 0), Slice by attributes (opset 6).
    auto cv = rnd({2, 3}, 12), dv = rnd({2}, 13), x2 = rnd({2, 2}, 14);
    GraphBuilder bf("folded", 6);
    auto sum =
        bf.op1("Add", {bf.constant("c", cv), bf.constant("d", dv)}, {{"broadcast", int64_t(1)}, {"axis", int64_t(0)}});
    auto cut = bf.op1(
        "Slice", {sum},
        {{"starts", std::vector<int64_t>{1}}, {"ends", std::vector<int64_t>{3}}, {"axes", std::vector<int64_t>{1}}});
    bf.output(bf.op1("Mul", {bf.input("x", DType::f32, Shape{2, 2}), cut}), "y");
    auto fo = test::run_graph(bf.build(), {{"x", x2}});
    REQUIRE(fo["y"].shape() == Shape{2, 2});
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t k = 0; k < 2; ++k) {
        float folded = float(double(cv.as<float>()[r * 3 + k + 1]) + double(dv.as<float>()[r]));
        CHECK(fo["y"].as<float>()[r * 2 + k] == doctest::Approx(x2.as<float>()[r * 2 + k] * folded).epsilon(1e-6));
      }
    // Without broadcast = 1 the shapes must be equal.
    GraphBuilder b0("nobcast", 6);
    b0.output(b0.op1("Mul", {b0.input("a", DType::f32, Shape{2, 3, 4}), b0.constant("b", bv)}), "y");
    Graph g0 = b0.build();
    CHECK(test::error_of([&] { prepare(g0); }).find("broadcast = 0") != std::string::npos);
    // B must fit into A from axis.
    GraphBuilder b2("badaxis", 6);
    b2.output(b2.op1("Sub", {b2.input("a", DType::f32, Shape{2, 3, 4}), b2.constant("b", bv)},
                     {{"broadcast", int64_t(1)}, {"axis", int64_t(2)}}),
              "y");
    Graph g2 = b2.build();
    CHECK(test::error_of([&] { prepare(g2); }).find("from axis 2") != std::string::npos);
  }

  TEST_CASE("PRelu before opset 7 reads a 1-D slope per channel") {
    auto x = rnd({2, 3, 4}, 5), slope = rnd({3}, 6);
    GraphBuilder b("prelu", 6);
    b.output(b.op1("PRelu", {b.input("x", DType::f32, Shape{2, 3, 4}), b.constant("s", slope)}), "y");
    auto out = test::run_graph(b.build(), {{"x", x}});
    for (int64_t i = 0; i < 24; ++i) {
      float v = x.as<float>()[i];
      CHECK(out["y"].as<float>()[i] == (v < 0 ? v * slope.as<float>()[(i / 4) % 3] : v));
    }
  }

  TEST_CASE("Gemm requires C before opset 11; BatchNormalization and Dropout of opset 6 run in test mode only") {
    GraphBuilder b("gemm", 10);
    b.output(b.gemm(b.input("a", DType::f32, Shape{2, 3}), b.constant("w", rnd({3, 4}, 7))), "y");
    Graph g = b.build();
    CHECK(test::error_of([&] { prepare(g); }).find("input C is required before opset 11") != std::string::npos);

    GraphBuilder bn("bn", 6);
    auto c = [&](const char* n, uint32_t s) { return bn.constant(n, rnd({3}, s)); };
    bn.output(bn.op1("BatchNormalization",
                     {bn.input("x", DType::f32, Shape{2, 3, 4}), c("s", 1), c("b", 2), c("m", 3),
                      bn.constant("v", HostTensor::from<float>(Shape{3}, std::vector<float>{1, 2, 3}))}),
              "y");
    Graph gb = bn.build();
    CHECK(test::error_of([&] { prepare(gb); }).find("is_test = 0") != std::string::npos);

    GraphBuilder bd("dropout", 6);
    bd.output(bd.op1("Dropout", {bd.input("x", DType::f32, Shape{2, 3})}), "y");
    Graph gd = bd.build();
    CHECK(test::error_of([&] { prepare(gd); }).find("is_test = 0") != std::string::npos);
  }

  TEST_CASE("Upsample before opset 9 takes scales as an attribute") {
    auto x = rnd({1, 1, 2, 3}, 8);
    GraphBuilder b("upsample", 7);
    b.output(b.op1("Upsample", {b.input("x", DType::f32, Shape{1, 1, 2, 3})},
                   {{"scales", std::vector<float>{1, 1, 2, 2}}, {"mode", std::string("nearest")}}),
             "y");
    auto out = test::run_graph(b.build(), {{"x", x}});
    REQUIRE(out["y"].shape() == Shape{1, 1, 4, 6});
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 6; ++c) CHECK(out["y"].as<float>()[r * 6 + c] == x.as<float>()[(r / 2) * 3 + c / 2]);
  }

  TEST_CASE("Resize of opset 10 is Upsample 9: scales input, asymmetric coordinates, floor for nearest") {
    const int64_t H = 3, W = 5;
    auto x = rnd({1, 2, H, W}, 9);
    for (const char* mode : {"nearest", "linear"})
      for (auto sc : {std::vector<float>{1, 1, 2, 3}, std::vector<float>{1, 1, 1.5f, 2.5f}}) {
        CAPTURE(mode);
        CAPTURE(sc[2]);
        GraphBuilder b("resize10", 10);
        b.output(b.op1("Resize", {b.input("x", DType::f32, Shape{1, 2, H, W}),
                                  b.constant("scales", HostTensor::from<float>(Shape{4}, sc))},
                       {{"mode", std::string(mode)}}),
                 "y");
        auto out = test::run_graph(b.build(), {{"x", x}});
        const int64_t OH = int64_t(std::floor(H * sc[2])), OW = int64_t(std::floor(W * sc[3]));
        REQUIRE(out["y"].shape() == Shape{1, 2, OH, OW});
        std::vector<float> want;
        for (int64_t ch = 0; ch < 2; ++ch)
          for (int64_t r = 0; r < OH; ++r)
            for (int64_t c = 0; c < OW; ++c) {
              const float* p = x.as<float>() + ch * H * W;
              const double yr = r / double(sc[2]), xc = c / double(sc[3]);
              if (std::string(mode) == "nearest") {
                want.push_back(p[int64_t(std::floor(yr)) * W + int64_t(std::floor(xc))]);
                continue;
              }
              const int64_t r0 = std::min<int64_t>(int64_t(std::floor(yr)), H - 1), c0 = std::min<int64_t>(int64_t(std::floor(xc)), W - 1);
              const int64_t r1 = std::min<int64_t>(r0 + 1, H - 1), c1 = std::min<int64_t>(c0 + 1, W - 1);
              const double fr = std::min(yr - double(r0), 1.0), fc = std::min(xc - double(c0), 1.0);
              const double top = p[r0 * W + c0] * (1 - fc) + p[r0 * W + c1] * fc;
              const double bot = p[r1 * W + c0] * (1 - fc) + p[r1 * W + c1] * fc;
              want.push_back(float(top * (1 - fr) + bot * fr));
            }
        CLDL_CHECK_CLOSE(out["y"].as<float>(), want.data(), want.size(), kRtol, kAtol);
      }
  }

  TEST_CASE("OneHot before opset 11 gives all off for a negative index; from 11 it counts from the end") {
    auto ids = HostTensor::from<int64_t>(Shape{5}, std::vector<int64_t>{-1, 0, 2, 3, -3});
    for (int64_t opset : {9, 10, 11}) {
      CAPTURE(opset);
      GraphBuilder b("onehot", opset);
      b.output(b.op1("OneHot", {b.input("ids", DType::i64, Shape{5}),
                                b.constant("depth", HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{3})),
                                b.constant("values", HostTensor::from<float>(Shape{2}, std::vector<float>{0, 1}))}),
               "y");
      auto out = test::run_graph(b.build(), {{"ids", ids}});
      REQUIRE(out["y"].shape() == Shape{5, 3});
      std::vector<float> want = {0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
      if (opset >= 11) want[2] = 1, want[12] = 1;  // -1 -> 2, -3 -> 0
      for (size_t i = 0; i < want.size(); ++i) CHECK(out["y"].as<float>()[i] == want[i]);
    }
  }

  TEST_CASE("Range past the host-fold limit is made on the device (f32, i32), checked at sampled positions") {
    const int64_t n = kMaxHostFoldElements + 5;
    const std::vector<int64_t> at{0, 1, 4095, 4096, (int64_t(1) << 24) + 1, n - 1};
    for (DType dt : {DType::f32, DType::i32}) {
      CAPTURE(to_string(dt));
      GraphBuilder b("range_big", 11);
      auto scalar = [&](const char* name, double v) {
        return b.constant(name, dt == DType::f32 ? HostTensor::from<float>(Shape{}, std::vector<float>{float(v)})
                                                 : HostTensor::from<int32_t>(Shape{}, std::vector<int32_t>{int32_t(v)}));
      };
      const double start = dt == DType::f32 ? 0.5 : -7, delta = dt == DType::f32 ? 0.25 : 3;
      auto r = b.op1("Range", {scalar("start", start), scalar("limit", start + delta * double(n)), scalar("delta", delta)});
      b.output(b.op1("Gather", {r, b.constant("at", HostTensor::from<int64_t>(Shape{int64_t(at.size())}, at))}), "y");
      auto m = test::compile_graph(b.build());
      bool device = false;
      for (auto& line : m->describe()) device |= line.find("device fill (start + i * delta)") != std::string::npos;
      CHECK(device);
      auto out = m->session()->run({}).at("y");
      REQUIRE(out.shape() == Shape{int64_t(at.size())});
      auto got = to_doubles(out);
      for (size_t k = 0; k < at.size(); ++k) {
        const double want = start + double(at[k]) * delta;
        CHECK(std::fabs(got[k] - want) <= (dt == DType::f32 ? 2e-7 * std::fabs(want) : 0.0));
      }
    }
  }

  TEST_CASE("3-D Conv (stride, padding, dilation, groups, bias) matches a direct reference") {
    const int64_t N = 2, C = 4, D = 5, H = 6, W = 7, K = 6, G = 2, KD = 2, KH = 3, KW = 2;
    const int64_t sd = 2, sh = 1, sw = 2, dd = 1, dh = 2, dw = 1, pf = 1, pt = 2, pl = 0, pk = 0, pb = 1, pr = 1;
    auto x = rnd({N, C, D, H, W}, 9), w = rnd({K, C / G, KD, KH, KW}, 10), bias = rnd({K}, 11);
    GraphBuilder b("conv3d", 11);
    b.output(b.op1("Conv", {b.input("x", DType::f32, Shape{N, C, D, H, W}), b.constant("w", w), b.constant("b", bias)},
                   {{"strides", std::vector<int64_t>{sd, sh, sw}},
                    {"dilations", std::vector<int64_t>{dd, dh, dw}},
                    {"pads", std::vector<int64_t>{pf, pt, pl, pk, pb, pr}},
                    {"group", G}}),
             "y");
    auto out = test::run_graph(b.build(), {{"x", x}});
    const int64_t OD = (D + pf + pk - ((KD - 1) * dd + 1)) / sd + 1, OH = (H + pt + pb - ((KH - 1) * dh + 1)) / sh + 1,
                  OW = (W + pl + pr - ((KW - 1) * dw + 1)) / sw + 1;
    REQUIRE(out["y"].shape() == Shape{N, K, OD, OH, OW});
    std::vector<float> want;
    const float *xp = x.as<float>(), *wp = w.as<float>();
    const int64_t CG = C / G, KG = K / G;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t od = 0; od < OD; ++od)
          for (int64_t oh = 0; oh < OH; ++oh)
            for (int64_t ow = 0; ow < OW; ++ow) {
              double acc = bias.as<float>()[k];
              for (int64_t cl = 0; cl < CG; ++cl)
                for (int64_t a = 0; a < KD; ++a)
                  for (int64_t i = 0; i < KH; ++i)
                    for (int64_t j = 0; j < KW; ++j) {
                      int64_t id = od * sd - pf + a * dd, ih = oh * sh - pt + i * dh, iw = ow * sw - pl + j * dw;
                      if (id < 0 || id >= D || ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                      int64_t c = k / KG * CG + cl;
                      acc += double(xp[(((n * C + c) * D + id) * H + ih) * W + iw]) *
                             wp[(((k * CG + cl) * KD + a) * KH + i) * KW + j];
                    }
              want.push_back(float(acc));
            }
    CLDL_CHECK_CLOSE(out["y"].as<float>(), want.data(), want.size(), 1e-4, 1e-5);
  }

  TEST_CASE("docs/ops.md lists every registry op with its domain, opsets and family, in order") {
    std::ifstream f(std::string(CLDL_SOURCE_DIR) + "/docs/ops.md");
    std::vector<std::string> rows;  // the table's rows after its header
    bool in_table = false;
    for (std::string line; std::getline(f, line);) {
      if (line.rfind("| --- ", 0) == 0) in_table = true;
      else if (in_table && line.rfind("| ", 0) == 0) rows.push_back(line);
    }
    const auto ops = test::table_ops();
    INFO("regenerate it: " << std::string(test::kWriteOpsTable));
    std::string missing;  // ops without their row
    for (const OpDef* d : ops) {
      const std::string row = test::ops_table_row(*d) + " ";
      if (std::none_of(rows.begin(), rows.end(), [&](auto& r) { return r.rfind(row, 0) == 0; })) missing += " " + row;
    }
    CHECK_MESSAGE(missing.empty(), "no row for:" << missing);
    CHECK(rows.size() == ops.size());
    for (size_t i = 0; i < std::min(rows.size(), ops.size()); ++i) {
      CAPTURE(rows[i]);
      CHECK(rows[i].rfind(test::ops_table_row(*ops[i]) + " ", 0) == 0);
    }
    CHECK(test::ops_table_row(*find_op("Softmax", "")) == "| Softmax | ai.onnx | 1+ | softmax |");
    // `cldl ops --json` lists the same ops.
    std::string out;
    REQUIRE(test::run_command(std::string(CLDL_CLI_PATH) + " ops --json", out) == 0);
    size_t listed = 0;
    for (size_t at = out.find("\"op\":"); at != std::string::npos; at = out.find("\"op\":", at + 1)) ++listed;
    CHECK(listed == ops.size());
  }
}
