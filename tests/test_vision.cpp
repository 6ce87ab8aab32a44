// Vision ops against tests/reference/vision_ref.cpp: NonMaxSuppression (both box formats, ties by the lower
// index, NaN scores, thresholds met exactly, several batches and classes; folded at load on constants and
// staged on run-time inputs), RoiAlign (avg / max, half_pixel / output_half_pixel, boxes outside the map,
// opset 10's default), GridSample (1-D to 3-D, every mode, padding and align_corners, grid points outside
// [-1, 1]; cubic with border padding as PyTorch / ONNX Runtime), AffineGrid (2-D, 3-D, dims of 1),
// CenterCropPad (odd crops and pads, axes, integer dtypes), Col2Im (1-D to 3-D, dilations, pads, strides),
// DeformConv (groups, offset groups, bias, mask) and the errors that name the node and the argument. Odd
// shapes and batch 1 throughout. Tolerance: NMS exact; f32 kernels 1e-4 relative against the double
// references.
#include <cmath>
#include <cstring>
#include <limits>

#include "layers/vision.hpp"
#include "models/builder.hpp"
#include "models/model.hpp"
#include "models/op_registry.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/vision_ref.hpp"
#include "support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::test;
using graph::GraphBuilder;

namespace {
std::vector<double> dbl(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void check_close(const std::vector<float>& got, const std::vector<double>& want, double rtol = 1e-4,
                 double atol = 1e-5) {
  REQUIRE(got.size() == want.size());
  std::vector<float> w(want.begin(), want.end());
  CLDL_CHECK_CLOSE(got.data(), w.data(), got.size(), rtol, atol);
}

HostTensor f32(const Shape& s, const std::vector<float>& v) { return HostTensor::from<float>(s, v); }
HostTensor i64(const Shape& s, const std::vector<int64_t>& v) { return HostTensor::from<int64_t>(s, v); }
std::vector<int64_t> ints(const HostTensor& t) {
  return std::vector<int64_t>(t.as<int64_t>(), t.as<int64_t>() + t.numel());
}

// Random boxes in corner form [y1, x1, y2, x2] (corners in either order) or centre form, many overlapping.
std::vector<float> random_boxes(int64_t b, int64_t n, uint32_t seed, bool center) {
  auto v = random_floats(size_t(b * n * 4), seed, 0.0f, 10.0f);
  if (center)
    for (size_t i = 0; i < v.size(); i += 4) v[i + 2] = v[i + 2] / 2 + 0.5f, v[i + 3] = v[i + 3] / 2 + 0.5f;
  return v;
}

// Scores with ties: a few distinct values.
std::vector<float> tied_scores(size_t n, uint32_t seed) {
  auto k = random_ints<int>(n, 0, 5, seed);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.1f * float(k[i]);
  return v;
}

struct NmsCase {
  int64_t batches, classes, n, max_out;
  float iou;
  std::optional<float> score;
  bool center;
};

// An NMS graph whose inputs are constants (folded at load) or graph inputs (a staged plan).
graph::Graph nms_graph(const NmsCase& c, const std::vector<float>& boxes, const std::vector<float>& scores,
                       bool constant, int opset = 11) {
  GraphBuilder b("nms", opset);
  const Shape bs{c.batches, c.n, 4}, ss{c.batches, c.classes, c.n};
  auto bx = constant ? b.constant("boxes", f32(bs, boxes)) : b.input("boxes", DType::f32, bs);
  auto sc = constant ? b.constant("scores", f32(ss, scores)) : b.input("scores", DType::f32, ss);
  std::vector<graph::Value> in{bx, sc, b.constant("max", i64(Shape{1}, {c.max_out})),
                               b.constant("iou", f32(Shape{1}, {c.iou}))};
  if (c.score) in.push_back(b.constant("score", f32(Shape{1}, {*c.score})));
  b.output(b.op1("NonMaxSuppression", in, {{"center_point_box", int64_t(c.center)}}), "selected");
  auto u = b.input("u", DType::f32, Shape{1});
  b.output(b.op1("Identity", {u}), "z");
  return b.build();
}
}  // namespace

TEST_SUITE("vision") {
  TEST_CASE("NonMaxSuppression folds constant inputs exactly: both box formats, ties, thresholds, batches, classes") {
    const NmsCase cases[] = {
        {1, 1, 1, 5, 0.5f, std::nullopt, false}, {1, 1, 7, 3, 0.5f, std::nullopt, false},
        {2, 3, 13, 4, 0.3f, 0.15f, false},       {3, 2, 17, 100, 0.0f, std::nullopt, true},
        {1, 4, 29, 9, 1.0f, 0.0f, true},         {2, 1, 11, 0, 0.5f, std::nullopt, false},
        {1, 2, 31, 31, 0.6f, 0.45f, false},      {2, 2, 9, 2, 0.7f, 1.0f, true},
    };
    uint32_t seed = 1;
    for (const NmsCase& c : cases) {
      CAPTURE(c.batches);
      CAPTURE(c.classes);
      CAPTURE(c.n);
      CAPTURE(c.max_out);
      CAPTURE(c.iou);
      CAPTURE(c.center);
      auto boxes = random_boxes(c.batches, c.n, seed++, c.center);
      auto scores = tied_scores(size_t(c.batches * c.classes * c.n), seed++);
      if (c.n == 17) scores[3] = scores[20] = std::nanf("");  // no score_threshold: NaN scores come last
      auto want = ref::nms(boxes, scores, c.batches, c.classes, c.n, c.max_out, c.iou, c.score, c.center);
      auto out = run_graph(nms_graph(c, boxes, scores, true), {{"u", random_tensor(Shape{1}, 1)}});
      const HostTensor& y = out.at("selected");
      REQUIRE(y.dtype() == DType::i64);
      REQUIRE(y.shape() == Shape{int64_t(want.size() / 3), 3});
      CHECK(ints(y) == want);
    }
  }

  TEST_CASE(
      "NonMaxSuppression: identical boxes and an IoU met exactly keep the lower index; optional inputs left out") {
    // Four identical boxes with equal scores: only index 0 survives. Two boxes overlapping by exactly 1/3
    // (IoU = threshold) both survive: suppression needs IoU > threshold.
    std::vector<float> boxes{0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1};
    std::vector<float> scores{0.9f, 0.9f, 0.9f, 0.9f};
    NmsCase c{1, 1, 4, 10, 0.5f, std::nullopt, false};
    auto out = run_graph(nms_graph(c, boxes, scores, true), {{"u", random_tensor(Shape{1}, 1)}});
    CHECK(ints(out.at("selected")) == std::vector<int64_t>{0, 0, 0});
    std::vector<float> two{0, 0, 1, 2, 0, 1, 1, 3};  // [0,2] and [1,3] in x: IoU 1 / 3
    NmsCase t{1, 1, 2, 10, 1.0f / 3.0f, std::nullopt, false};
    out = run_graph(nms_graph(t, two, {0.5f, 0.7f}, true), {{"u", random_tensor(Shape{1}, 1)}});
    CHECK(ints(out.at("selected")) == ref::nms(two, {0.5f, 0.7f}, 1, 1, 2, 10, 1.0f / 3.0f, std::nullopt, false));
    // Only boxes and scores: max_output_boxes_per_class defaults to 0, so nothing is selected.
    GraphBuilder b("nms2", 10);
    auto y = b.op1("NonMaxSuppression",
                   {b.constant("b", f32(Shape{1, 2, 4}, two)), b.constant("s", f32(Shape{1, 1, 2}, {0.5f, 0.7f}))});
    b.output(y, "selected");
    auto u = b.input("u", DType::f32, Shape{1});
    b.output(b.op1("Identity", {u}), "z");
    out = run_graph(b.build(), {{"u", random_tensor(Shape{1}, 1)}});
    CHECK(out.at("selected").shape() == Shape{0, 3});
  }

  TEST_CASE("NonMaxSuppression over thousands of boxes in offset clusters (torchvision's batched NMS), with NaN and "
            "infinite coordinates, decides as the reference") {
    // 2,000 boxes in 37 clusters 100 apart in x (many buckets, overlaps within a cluster only), both box
    // formats; a NaN box, a box reaching to +inf and one from -inf (they intersect every box of their rows).
    for (bool center : {false, true}) {
      CAPTURE(center);
      const int64_t n = 2000;
      auto r = random_floats(size_t(n * 4), center ? 41 : 42, 0.0f, 1.0f);
      std::vector<float> boxes(size_t(n * 4));
      for (int64_t i = 0; i < n; ++i) {
        float* b = &boxes[size_t(i * 4)];
        const float x = float(i % 37) * 100.0f + 40.0f * r[size_t(i * 4)], y = 40.0f * r[size_t(i * 4 + 1)];
        const float w = 3.0f + 20.0f * r[size_t(i * 4 + 2)], h = 3.0f + 20.0f * r[size_t(i * 4 + 3)];
        if (center) b[0] = x, b[1] = y, b[2] = w, b[3] = h;
        else b[0] = y, b[1] = x, b[2] = y + h, b[3] = x + w;  // [y1, x1, y2, x2]
      }
      const float inf = std::numeric_limits<float>::infinity();
      boxes[5 * 4 + 1] = std::nanf("");
      if (!center) boxes[6 * 4 + 3] = inf, boxes[7 * 4 + 1] = -inf;
      else boxes[6 * 4 + 2] = inf;
      auto scores = random_floats(size_t(n), 43, 0.0f, 1.0f);
      scores[6] = scores[7] = 0.999f;  // the infinite boxes come early and suppress across clusters
      for (float iou : {0.5f, 0.2f}) {
        CAPTURE(iou);
        NmsCase c{1, 1, n, 100000, iou, std::nullopt, center};
        auto want = ref::nms(boxes, scores, 1, 1, n, c.max_out, c.iou, c.score, c.center);
        auto out = run_graph(nms_graph(c, boxes, scores, true), {{"u", random_tensor(Shape{1}, 1)}});
        CHECK(want.size() / 3 > 100);
        CHECK(want.size() / 3 < size_t(n));
        CHECK(ints(out.at("selected")) == want);
      }
    }
  }

  TEST_CASE("NonMaxSuppression on run-time inputs: a staged plan, re-planned per value, output shapes from the data") {
    using namespace graph;
    NmsCase c{2, 2, 15, 5, 0.4f, 0.2f, false};
    auto m = Model::create(test::shared_ctx(), nms_graph(c, {}, {}, false));
    auto s = m->session();
    for (uint32_t seed : {11u, 12u, 13u}) {
      CAPTURE(seed);
      auto boxes = random_boxes(c.batches, c.n, seed, false);
      auto scores = tied_scores(size_t(c.batches * c.classes * c.n), seed + 100);
      auto out = s->run({{"boxes", f32(Shape{c.batches, c.n, 4}, boxes)},
                         {"scores", f32(Shape{c.batches, c.classes, c.n}, scores)},
                         {"u", random_tensor(Shape{1}, 1)}});
      CHECK(ints(out.at("selected")) ==
            ref::nms(boxes, scores, c.batches, c.classes, c.n, c.max_out, c.iou, c.score, false));
    }
    // Boxes computed on the device (a Mul) feed it as well.
    GraphBuilder b("nms_mul", 11);
    auto bx = b.op1("Mul", {b.input("boxes", DType::f32, Shape{1, 6, 4}), b.constant("two", f32(Shape{1}, {2.0f}))});
    b.output(
        b.op1("NonMaxSuppression", {bx, b.input("scores", DType::f32, Shape{1, 1, 6}),
                                    b.constant("max", i64(Shape{1}, {3})), b.constant("iou", f32(Shape{1}, {0.5f}))}),
        "selected");
    auto boxes = random_boxes(1, 6, 21, false);
    auto scores = tied_scores(6, 22);
    auto m2 = Model::create(test::shared_ctx(), b.build());
    auto out = m2->session()->run({{"boxes", f32(Shape{1, 6, 4}, boxes)}, {"scores", f32(Shape{1, 1, 6}, scores)}});
    std::vector<float> doubled(boxes);
    for (auto& v : doubled) v *= 2;
    CHECK(ints(out.at("selected")) == ref::nms(doubled, scores, 1, 1, 6, 3, 0.5f, std::nullopt, false));
  }

  TEST_CASE("NonMaxSuppression errors name the node and the argument") {
    using namespace graph;
    auto err = [](Shape bs, Shape ss, int64_t center, DType max_dt) {
      GraphBuilder b("nms_bad", 11);
      HostTensor mx = max_dt == DType::i64 ? i64(Shape{1}, {3}) : f32(Shape{1}, {3});
      auto y = b.op1("NonMaxSuppression",
                     {b.constant("bx", HostTensor(DType::f32, bs)), b.constant("sc", HostTensor(DType::f32, ss)),
                      b.constant("max", mx)},
                     {{"center_point_box", center}});
      b.output(y, "selected");
      auto u = b.input("u", DType::f32, Shape{1});
      b.output(b.op1("Identity", {u}), "z");
      return error_of([&] { compile_graph(b.build()); });
    };
    auto m = err(Shape{1, 5, 3}, Shape{1, 1, 5}, 0, DType::i64);
    CHECK(m.find("NonMaxSuppression") != std::string::npos);
    CHECK(m.find("boxes") != std::string::npos);
    m = err(Shape{1, 5, 4}, Shape{1, 1, 6}, 0, DType::i64);
    CHECK(m.find("scores") != std::string::npos);
    m = err(Shape{1, 5, 4}, Shape{1, 1, 5}, 2, DType::i64);
    CHECK(m.find("center_point_box") != std::string::npos);
    m = err(Shape{1, 5, 4}, Shape{1, 1, 5}, 0, DType::f32);
    CHECK(m.find("max_output_boxes_per_class") != std::string::npos);
    // Run-time inputs of any size (8000 box coordinates, past kMaxDecidingElements): a counted output,
    // selected in a host step of the run (tests/test_data_dependent.cpp checks the values).
    GraphBuilder b("nms_big", 11);
    b.output(b.op1("NonMaxSuppression",
                   {b.input("boxes", DType::f32, Shape{1, 2000, 4}), b.input("scores", DType::f32, Shape{1, 1, 2000}),
                    b.constant("max", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{5}))}),
             "selected");
    auto big = Model::create(test::shared_ctx(), b.build());
    auto sel = big->session()->run({{"boxes", HostTensor(DType::f32, Shape{1, 2000, 4})},
                                     {"scores", HostTensor(DType::f32, Shape{1, 1, 2000})}}).at("selected");
    // Zero-area boxes never overlap: the first 5 by score (all 0: ties to the lower index).
    REQUIRE(sel.shape() == Shape{5, 3});
    CHECK(std::vector<int64_t>(sel.as<int64_t>(), sel.as<int64_t>() + 15) ==
          std::vector<int64_t>{0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4});
  }

  TEST_CASE("RoiAlign: avg and max, both coordinate modes, sampling ratios, boxes outside the map, batch 1") {
    struct Case {
      Shape x;
      int64_t rois, oh, ow, sampling;
      float scale;
      bool half_pixel, max_mode;
    };
    const Case cases[] = {
        {{1, 1, 10, 10}, 3, 5, 5, 2, 1.0f, false, false}, {{2, 3, 7, 9}, 5, 3, 4, 0, 0.5f, true, false},
        {{2, 3, 7, 9}, 5, 3, 4, 0, 0.5f, false, true},    {{3, 2, 5, 6}, 4, 2, 3, 3, 1.0f, true, true},
        {{1, 5, 13, 11}, 1, 1, 1, 0, 0.25f, true, false}, {{2, 1, 4, 4}, 6, 7, 2, 1, 2.0f, false, false},
    };
    uint32_t seed = 30;
    for (const Case& c : cases) {
      CAPTURE(c.x.str());
      CAPTURE(c.rois);
      CAPTURE(c.half_pixel);
      CAPTURE(c.max_mode);
      auto x = random_floats(size_t(c.x.numel()), seed++);
      // Corners from -3 to 1.2x the map (in input coordinates before scaling), some inverted or tiny.
      const float span = float(std::max(c.x[2], c.x[3])) / c.scale;
      auto rois = random_floats(size_t(c.rois * 4), seed++, -3.0f, 1.2f * span);
      rois[0] = rois[2];  // a zero-width box
      auto batch = random_ints<int64_t>(size_t(c.rois), 0, c.x[0] - 1, seed++);
      RoiAlignConfig cfg{c.x,        c.rois,  c.oh,         c.ow,
                         c.sampling, c.scale, c.half_pixel, c.max_mode ? RoiAlignMode::max : RoiAlignMode::avg};
      auto op = RoiAlign::create(ctx(), 0, cfg);
      Tensor y =
          run_op(*op, {up(x, c.x), up(rois, Shape{c.rois, 4}), up(batch, Shape{c.rois})}, RoiAlign::validate(cfg));
      check_close(down<float>(y), ref::roi_align(dbl(x), c.x.dims, dbl(rois), batch, c.oh, c.ow, c.sampling, c.scale,
                                                 c.half_pixel, c.max_mode));
    }
    // A batch index out of range on the device gives zeros, never a read out of bounds.
    RoiAlignConfig cfg{{1, 2, 4, 4}, 2, 2, 2, 0, 1.0f, true, RoiAlignMode::avg};
    auto op = RoiAlign::create(ctx(), 0, cfg);
    Tensor y =
        run_op(*op,
               {up(random_floats(32, 3), Shape{1, 2, 4, 4}),
                up(std::vector<float>{0, 0, 3, 3, 0, 0, 3, 3}, Shape{2, 4}), up(std::vector<int64_t>{5, -1}, Shape{2})},
               Shape{2, 2, 2, 2});
    for (float v : down<float>(y)) CHECK(v == 0.0f);
  }

  TEST_CASE("RoiAlign in a graph: opset 10 is output_half_pixel, opset 16 defaults to half_pixel; errors") {
    using namespace graph;
    const Shape xs{1, 2, 6, 5};
    auto x = random_floats(60, 40);
    std::vector<float> rois{0.3f, 0.7f, 4.1f, 3.3f, 1.0f, 1.0f, 1.5f, 1.2f};
    for (int opset : {10, 16}) {
      CAPTURE(opset);
      GraphBuilder b("roi", opset);
      b.output(b.op1("RoiAlign",
                     {b.input("x", DType::f32, xs), b.input("rois", DType::f32, Shape{2, 4}),
                      b.input("bi", DType::i64, Shape{2})},
                     {{"output_height", int64_t(3)}, {"output_width", int64_t(2)}}),
               "y");
      auto out =
          run_graph(b.build(), {{"x", f32(xs, x)}, {"rois", f32(Shape{2, 4}, rois)}, {"bi", i64(Shape{2}, {0, 0})}});
      const HostTensor& y = out.at("y");
      REQUIRE(y.shape() == Shape{2, 2, 3, 2});
      check_close(std::vector<float>(y.as<float>(), y.as<float>() + y.numel()),
                  ref::roi_align(dbl(x), xs.dims, dbl(rois), {0, 0}, 3, 2, 0, 1.0, opset >= 16, false));
    }
    auto err = [&](Shape rs, Shape bs, std::vector<int64_t> bi, std::map<std::string, AttrValue> attrs) {
      GraphBuilder b("roi_bad", 16);
      b.output(
          b.op1("RoiAlign",
                {b.input("x", DType::f32, xs), b.input("rois", DType::f32, rs), b.constant("bi", i64(bs, bi))}, attrs),
          "y");
      return error_of([&] { compile_graph(b.build()); });
    };
    auto m = err(Shape{2, 5}, Shape{2}, {0, 0}, {});
    CHECK(m.find("RoiAlign") != std::string::npos);
    CHECK(m.find("rois") != std::string::npos);
    m = err(Shape{2, 4}, Shape{2}, {0, 1}, {});
    CHECK(m.find("batch_indices") != std::string::npos);
    CHECK(m.find("holds 1") != std::string::npos);
    m = err(Shape{2, 4}, Shape{3}, {0, 0, 0}, {});
    CHECK(m.find("batch_indices") != std::string::npos);
    m = err(Shape{2, 4}, Shape{2}, {0, 0}, {{"mode", std::string("median")}});
    CHECK(m.find("mode") != std::string::npos);
    m = err(Shape{2, 4}, Shape{2}, {0, 0}, {{"coordinate_transformation_mode", std::string("corners")}});
    CHECK(m.find("coordinate_transformation_mode") != std::string::npos);
  }

  TEST_CASE("GridSample: 1-D to 3-D, every mode, padding and align_corners, points outside [-1, 1]") {
    const Shape inputs[][2] = {
        {{1, 1, 3, 2}, {1, 2, 4, 2}},       {{2, 3, 5, 7}, {2, 3, 5, 2}},       {{1, 2, 1, 1}, {1, 2, 3, 2}},
        {{2, 2, 3, 4, 5}, {2, 2, 3, 2, 3}}, {{1, 1, 3, 2, 2}, {1, 2, 4, 2, 3}}, {{2, 3, 9}, {2, 7, 1}},
    };
    uint32_t seed = 50;
    for (const auto& [xs, gs] : inputs) {
      auto x = random_floats(size_t(xs.numel()), seed++);
      auto grid = random_floats(size_t(gs.numel()), seed++, -1.6f, 1.6f);
      grid[0] = 1.0f, grid[1] = -1.0f;  // the corners exactly
      for (auto mode : {GridSampleMode::linear, GridSampleMode::nearest, GridSampleMode::cubic})
        for (auto pad : {GridPadding::zeros, GridPadding::border, GridPadding::reflection})
          for (bool align : {false, true}) {
            CAPTURE(xs.str());
            CAPTURE(int(mode));
            CAPTURE(int(pad));
            CAPTURE(align);
            GridSampleConfig cfg{xs, gs, mode, pad, align};
            auto op = GridSample::create(ctx(), 0, cfg);
            Tensor y = run_op(*op, {up(x, xs), up(grid, gs)}, GridSample::validate(cfg));
            const char* m = mode == GridSampleMode::linear    ? "linear"
                            : mode == GridSampleMode::nearest ? "nearest"
                                                              : "cubic";
            const char* p = pad == GridPadding::zeros ? "zeros" : pad == GridPadding::border ? "border" : "reflection";
            check_close(down<float>(y), ref::grid_sample(dbl(x), xs.dims, dbl(grid), gs.dims, m, p, align));
          }
    }
  }

  TEST_CASE("GridSample: NaN and huge grid values never read out of bounds; far points are zero with zeros padding") {
    const Shape xs{1, 2, 5, 4}, gs{1, 2, 3, 2};
    auto x = random_floats(40, 55);
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> grid{std::nanf(""), 0.5f, 1e30f, -1e30f, -1e30f, 0.0f, inf, 0.2f, 3e9f, -3e9f, 0.1f, -inf};
    for (auto mode : {GridSampleMode::linear, GridSampleMode::nearest, GridSampleMode::cubic})
      for (auto pad : {GridPadding::zeros, GridPadding::border, GridPadding::reflection}) {
        CAPTURE(int(mode));
        CAPTURE(int(pad));
        GridSampleConfig cfg{xs, gs, mode, pad, false};
        auto op = GridSample::create(ctx(), 0, cfg);
        auto y = down<float>(run_op(*op, {up(x, xs), up(grid, gs)}, GridSample::validate(cfg)));
        if (pad == GridPadding::zeros)  // points 1 (1e30, -1e30) and 4 (3e9, -3e9) of both channels
          for (size_t c = 0; c < 2; ++c) {
            CHECK(y[c * 6 + 1] == 0.0f);
            CHECK(y[c * 6 + 4] == 0.0f);
          }
      }
  }

  TEST_CASE("GridSample in a graph: opset 16 mode names and 4-D only, opset 20 names; errors") {
    using namespace graph;
    const Shape xs{1, 2, 4, 3}, gs{1, 3, 2, 2};
    auto x = random_floats(24, 60);
    auto grid = random_floats(12, 61, -1.2f, 1.2f);
    for (auto [opset, mode, ref_mode] : {std::tuple{16, "bilinear", "linear"}, std::tuple{16, "bicubic", "cubic"},
                                         std::tuple{20, "cubic", "cubic"}, std::tuple{22, "nearest", "nearest"}}) {
      CAPTURE(opset);
      CAPTURE(mode);
      GraphBuilder b("gs", opset);
      b.output(b.op1("GridSample", {b.input("x", DType::f32, xs), b.input("g", DType::f32, gs)},
                     {{"mode", std::string(mode)}, {"padding_mode", std::string("border")}}),
               "y");
      auto out = run_graph(b.build(), {{"x", f32(xs, x)}, {"g", f32(gs, grid)}});
      const HostTensor& y = out.at("y");
      check_close(std::vector<float>(y.as<float>(), y.as<float>() + y.numel()),
                  ref::grid_sample(dbl(x), xs.dims, dbl(grid), gs.dims, ref_mode, "border", false));
    }
    auto err = [&](int opset, Shape x5, Shape g5, std::map<std::string, AttrValue> attrs) {
      GraphBuilder b("gs_bad", opset);
      b.output(b.op1("GridSample", {b.input("x", DType::f32, x5), b.input("g", DType::f32, g5)}, attrs), "y");
      return error_of([&] { compile_graph(b.build()); });
    };
    auto m = err(20, xs, gs, {{"mode", std::string("bilinear")}});
    CHECK(m.find("GridSample") != std::string::npos);
    CHECK(m.find("mode") != std::string::npos);
    m = err(16, Shape{1, 1, 2, 2, 2}, Shape{1, 1, 1, 1, 3}, {});
    CHECK(m.find("4-D") != std::string::npos);
    m = err(20, xs, Shape{1, 3, 2, 3}, {});
    CHECK(m.find("grid") != std::string::npos);
    m = err(20, xs, Shape{2, 3, 2, 2}, {});
    CHECK(m.find("batch") != std::string::npos);
    m = err(20, xs, gs, {{"padding_mode", std::string("wrap")}});
    CHECK(m.find("padding_mode") != std::string::npos);
  }

  TEST_CASE("AffineGrid: 2-D and 3-D, align_corners, dims of 1, batch 1; a size that does not match theta") {
    using namespace graph;
    const std::vector<int64_t> sizes[] = {{1, 3, 5, 7}, {2, 1, 1, 4}, {3, 2, 6, 1}, {1, 1, 3, 4, 5}, {2, 3, 1, 2, 3}};
    uint32_t seed = 70;
    for (const auto& size : sizes)
      for (bool align : {false, true}) {
        CAPTURE(size.size());
        CAPTURE(align);
        const int64_t nd = int64_t(size.size()) - 2;
        const Shape ts{size[0], nd, nd + 1};
        auto theta = random_floats(size_t(ts.numel()), seed++);
        GraphBuilder b("ag", 20);
        b.output(b.op1("AffineGrid",
                       {b.input("theta", DType::f32, ts), b.constant("size", i64(Shape{int64_t(size.size())}, size))},
                       {{"align_corners", int64_t(align)}}),
                 "grid");
        auto out = run_graph(b.build(), {{"theta", f32(ts, theta)}});
        const HostTensor& y = out.at("grid");
        check_close(std::vector<float>(y.as<float>(), y.as<float>() + y.numel()),
                    ref::affine_grid(dbl(theta), size, align));
      }
    GraphBuilder b("ag_bad", 20);
    b.output(b.op1("AffineGrid",
                   {b.input("theta", DType::f32, Shape{2, 2, 3}), b.constant("size", i64(Shape{4}, {3, 1, 4, 4}))}),
             "g");
    auto m = error_of([&] { compile_graph(b.build()); });
    CHECK(m.find("AffineGrid") != std::string::npos);
    CHECK(m.find("theta") != std::string::npos);
  }

  TEST_CASE("CenterCropPad: crops and pads by odd and even differences, axes, integer dtypes, batch 1") {
    using namespace graph;
    struct Case {
      Shape x;
      std::vector<int64_t> shape, axes;
    };
    const Case cases[] = {{{20, 10, 3}, {10, 7, 3}, {}},
                          {{10, 7, 3}, {20, 10, 3}, {}},
                          {{1, 9, 8}, {4, 11}, {1, 2}},
                          {{5, 6, 7}, {2, 9}, {-1, 0}},
                          {{3}, {8}, {}},
                          {{2, 3, 5, 4}, {1}, {2}}};
    uint32_t seed = 80;
    for (const Case& c : cases) {
      CAPTURE(c.x.str());
      auto x = random_floats(size_t(c.x.numel()), seed++);
      for (DType dt : {DType::f32, DType::i64, DType::u8}) {
        CAPTURE(to_string(dt));
        GraphBuilder b("ccp", 18);
        std::map<std::string, AttrValue> attrs;
        if (!c.axes.empty()) attrs["axes"] = c.axes;
        b.output(
            b.op1("CenterCropPad",
                  {b.input("x", dt, c.x), b.constant("shape", i64(Shape{int64_t(c.shape.size())}, c.shape))}, attrs),
            "y");
        HostTensor xt = f32(c.x, x);
        std::vector<double> xv = dbl(x);
        if (dt != DType::f32) {  // small integers
          for (auto& v : xv) v = std::round(v * 100.0) + (dt == DType::u8 ? 100.0 : 0.0);
          xt = from_doubles(dt, c.x, xv);
        }
        auto out = run_graph(b.build(), {{"x", xt}});
        ref::Dims od;
        auto want = ref::center_crop_pad(xv, c.x.dims, c.shape, c.axes, od);
        const HostTensor& y = out.at("y");
        REQUIRE(y.shape() == Shape(od));
        REQUIRE(y.dtype() == dt);
        CHECK(to_doubles(y) == want);
      }
    }
    GraphBuilder b("ccp_bad", 18);
    b.output(b.op1("CenterCropPad", {b.input("x", DType::f32, Shape{4, 4}), b.constant("shape", i64(Shape{1}, {3}))}),
             "y");
    auto m = error_of([&] { compile_graph(b.build()); });
    CHECK(m.find("CenterCropPad") != std::string::npos);
    CHECK(m.find("shape") != std::string::npos);
  }

  TEST_CASE("Col2Im: 1-D to 3-D, dilations, pads, strides, batch 1; mismatched block counts are errors") {
    using namespace graph;
    struct Case {
      int64_t n, c;
      std::vector<int64_t> image, block, dil, pads, strides;
    };
    const Case cases[] = {
        {1, 1, {5, 5}, {1, 5}, {1, 1}, {0, 0, 0, 0}, {1, 1}},
        {2, 3, {7, 6}, {3, 2}, {1, 2}, {1, 0, 2, 1}, {2, 1}},
        {1, 2, {9}, {4}, {2}, {1, 2}, {3}},
        {2, 1, {3, 4, 5}, {2, 2, 3}, {1, 1, 1}, {0, 1, 0, 1, 0, 1}, {1, 2, 1}},
        {1, 1, {5, 5}, {2, 2}, {3, 3}, {0, 0, 0, 0}, {3, 3}},  // blocks that leave image elements untouched
    };
    uint32_t seed = 90;
    for (const Case& c : cases) {
      CAPTURE(c.image.size());
      const size_t nd = c.image.size();
      int64_t K = 1, L = 1;
      for (size_t i = 0; i < nd; ++i) {
        K *= c.block[i];
        L *= (c.image[i] + c.pads[i] + c.pads[i + nd] - c.dil[i] * (c.block[i] - 1) - 1) / c.strides[i] + 1;
      }
      const Shape xs{c.n, c.c * K, L};
      auto x = random_floats(size_t(xs.numel()), seed++);
      GraphBuilder b("c2i", 18);
      b.output(b.op1("Col2Im",
                     {b.input("x", DType::f32, xs), b.constant("image", i64(Shape{int64_t(nd)}, c.image)),
                      b.constant("block", i64(Shape{int64_t(nd)}, c.block))},
                     {{"dilations", c.dil}, {"pads", c.pads}, {"strides", c.strides}}),
               "y");
      auto out = run_graph(b.build(), {{"x", f32(xs, x)}});
      const HostTensor& y = out.at("y");
      check_close(std::vector<float>(y.as<float>(), y.as<float>() + y.numel()),
                  ref::col2im(dbl(x), xs.dims, c.image, c.block, c.dil, c.pads, c.strides));
    }
    GraphBuilder b("c2i_bad", 18);
    b.output(b.op1("Col2Im", {b.input("x", DType::f32, Shape{1, 4, 7}), b.constant("image", i64(Shape{2}, {4, 4})),
                              b.constant("block", i64(Shape{2}, {2, 2}))}),
             "y");
    auto m = error_of([&] { compile_graph(b.build()); });
    CHECK(m.find("Col2Im") != std::string::npos);
    CHECK(m.find("sliding blocks") != std::string::npos);
  }

  TEST_CASE("DeformConv: groups, offset groups, strides, pads, dilations, bias and mask, batch 1; errors") {
    using namespace graph;
    struct Case {
      Shape x, w;
      int64_t group, offset_group;
      std::vector<int64_t> strides, pads, dilations;
      bool bias, mask;
    };
    const Case cases[] = {
        {{1, 1, 3, 3}, {1, 1, 2, 2}, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, false, false},
        {{2, 4, 7, 6}, {6, 2, 3, 2}, 2, 2, {2, 1}, {1, 0, 1, 1}, {1, 2}, true, true},
        {{1, 3, 5, 8}, {5, 3, 3, 3}, 1, 3, {1, 2}, {1, 1, 1, 1}, {2, 1}, true, false},
        {{3, 2, 4, 4}, {2, 1, 1, 2}, 2, 1, {1, 1}, {0, 2, 0, 0}, {1, 1}, false, true},
    };
    uint32_t seed = 100;
    for (const Case& c : cases) {
      CAPTURE(c.x.str());
      CAPTURE(c.w.str());
      const int64_t KH = c.w[2], KW = c.w[3];
      const int64_t OH = (c.x[2] + c.pads[0] + c.pads[2] - ((KH - 1) * c.dilations[0] + 1)) / c.strides[0] + 1;
      const int64_t OW = (c.x[3] + c.pads[1] + c.pads[3] - ((KW - 1) * c.dilations[1] + 1)) / c.strides[1] + 1;
      const Shape os{c.x[0], c.offset_group * 2 * KH * KW, OH, OW}, ms{c.x[0], c.offset_group * KH * KW, OH, OW};
      auto x = random_floats(size_t(c.x.numel()), seed++);
      auto w = random_floats(size_t(c.w.numel()), seed++);
      auto off = random_floats(size_t(os.numel()), seed++, -2.5f, 2.5f);  // taps well outside the map too
      auto bias = c.bias ? random_floats(size_t(c.w[0]), seed++) : std::vector<float>{};
      auto mask = c.mask ? random_floats(size_t(ms.numel()), seed++, 0.0f, 1.0f) : std::vector<float>{};
      GraphBuilder b("dc", 19);
      std::vector<Value> in{b.input("x", DType::f32, c.x), b.constant("w", f32(c.w, w)),
                            b.input("off", DType::f32, os)};
      if (c.bias || c.mask) in.push_back(c.bias ? b.constant("b", f32(Shape{c.w[0]}, bias)) : Value{});
      if (c.mask) in.push_back(b.input("mask", DType::f32, ms));
      b.output(b.op1("DeformConv", in,
                     {{"group", c.group},
                      {"offset_group", c.offset_group},
                      {"strides", c.strides},
                      {"pads", c.pads},
                      {"dilations", c.dilations},
                      {"kernel_shape", std::vector<int64_t>{KH, KW}}}),
               "y");
      std::map<std::string, HostTensor> feed{{"x", f32(c.x, x)}, {"off", f32(os, off)}};
      if (c.mask) feed["mask"] = f32(ms, mask);
      auto out = run_graph(b.build(), feed);
      ref::Dims od;
      auto want = ref::deform_conv(dbl(x), c.x.dims, dbl(w), c.w.dims, dbl(off), dbl(bias), dbl(mask), c.group,
                                   c.offset_group, c.strides, c.pads, c.dilations, od);
      const HostTensor& y = out.at("y");
      REQUIRE(y.shape() == Shape(od));
      check_close(std::vector<float>(y.as<float>(), y.as<float>() + y.numel()), want);
      // The op itself: sampled columns + GEMM with a workspace (what the graph ran), direct without one.
      DeformConvConfig cfg{c.x, c.w, c.group, c.offset_group, c.strides, c.pads, c.dilations, c.bias, c.mask};
      auto op = DeformConv::create(ctx(), 0, cfg);
      CHECK(op->algorithm().find("sampled columns") != std::string::npos);
      std::vector<Tensor> ins{up(x, c.x), up(w, c.w), up(off, os)};
      if (c.bias) ins.push_back(up(bias, Shape{c.w[0]}));
      if (c.mask) ins.push_back(up(mask, ms));
      Tensor ws = ctx().alloc(Shape{int64_t(op->workspace_bytes() / 4)}, DType::f32);
      for (const Tensor* workspace : {static_cast<const Tensor*>(&ws), static_cast<const Tensor*>(nullptr)}) {
        CAPTURE(workspace != nullptr);
        Tensor yt = ctx().alloc(Shape(od), DType::f32);
        auto ec = ctx().exec();
        Tensor outs[] = {yt};
        op->enqueue(ins, outs, workspace, ec);
        ctx().finish();
        check_close(down<float>(yt), want);
      }
    }
    GraphBuilder b("dc_bad", 19);
    b.output(
        b.op1("DeformConv", {b.input("x", DType::f32, Shape{1, 2, 4, 4}), b.input("w", DType::f32, Shape{1, 2, 2, 2}),
                             b.input("off", DType::f32, Shape{1, 7, 3, 3})}),
        "y");
    auto m = error_of([&] { compile_graph(b.build()); });
    CHECK(m.find("DeformConv") != std::string::npos);
    CHECK(m.find("offset") != std::string::npos);
  }

}  // TEST_SUITE
