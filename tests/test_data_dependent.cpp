// Output shapes decided by data (NonZero, NonMaxSuppression on run-time inputs): the plan stops after the
// op, the run reads back only its count, and the rest is planned per count over a view of the first rows of
// the op's bound-sized buffer (models/model.hpp, docs/dynamic-shapes.md). Checked against
// tests/reference (index_ref's non_zero, vision_ref's nms) on inputs past kMaxDecidingElements, at counts
// of 0 and of the full bound, with Gather / GatherND / Reshape downstream, and the rest's plan cache.
#include <algorithm>
#include <random>

#include "models/model.hpp"
#include "reference/index_ref.hpp"
#include "reference/vision_ref.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {


HostTensor i64s(Shape s, std::vector<int64_t> v) { return HostTensor::from<int64_t>(std::move(s), v); }

std::vector<int64_t> ints(const HostTensor& t) { return to_ints(t); }

// x [r, c] -> NonZero -> idx [2, count] (an output), Gather(idx, 0) -> rows [count], Gather(x, rows) ->
// picked [count, c]; Reshape(idx, [-1]) -> flat [2 * count].
Graph nonzero_graph() {
  GraphBuilder b("nonzero", 13);
  auto x = b.input("x", DType::f32, test::sym_shape({-1, -1}, {"r", "c"}));
  auto idx = b.op1("NonZero", {x});
  b.output(idx, "idx");
  auto zero = b.constant("zero", i64s(Shape{}, {0}));
  auto rows = b.op1("Gather", {idx, zero}, {{"axis", int64_t(0)}});
  b.output(b.op1("Gather", {x, rows}, {{"axis", int64_t(0)}}), "picked");
  b.output(b.op1("Reshape", {idx, b.constant("flat_shape", i64s(Shape{1}, {-1}))}), "flat");
  return b.build();
}

// boxes [1, n, 4], scores [1, classes, n], max_per_class / iou / score threshold as run-time inputs ->
// NonMaxSuppression -> selected [count, 3] (an output); GatherND(scores, selected) -> their scores [count];
// Gather(selected, 2, axis 1) -> box indices, Gather(boxes[0], them) -> kept boxes [count, 4].
Graph nms_graph(int64_t classes) {
  GraphBuilder b("nms", 11);
  auto boxes = b.input("boxes", DType::f32, test::sym_shape({1, -1, 4}, {"", "n", ""}));
  auto scores = b.input("scores", DType::f32, test::sym_shape({1, classes, -1}, {"", "", "n"}));
  auto max = b.input("max_per_class", DType::i64, Shape{1});
  auto iou = b.input("iou", DType::f32, Shape{1});
  auto score = b.input("score_threshold", DType::f32, Shape{1});
  auto sel = b.op1("NonMaxSuppression", {boxes, scores, max, iou, score});
  b.output(sel, "selected");
  b.output(b.op1("GatherND", {scores, sel}), "kept_scores");
  auto two = b.constant("two", i64s(Shape{}, {2}));
  auto box_idx = b.op1("Gather", {sel, two}, {{"axis", int64_t(1)}});
  auto zero = b.constant("zero", i64s(Shape{1}, {0}));
  auto flat_boxes = b.op1("Squeeze", {boxes, zero});
  b.output(b.op1("Gather", {flat_boxes, box_idx}, {{"axis", int64_t(0)}}), "kept_boxes");
  return b.build();
}

}  // namespace

TEST_SUITE("dynamic shapes") {
  TEST_CASE("NonZero on run-time data: the count alone comes back, the rest is planned per count") {
    auto m = Model::create(test::shared_ctx(), nonzero_graph());
    auto s = m->session();
    std::mt19937 rng(5);
    const int64_t r = 97, c = 61;  // 5917 elements, past kMaxDecidingElements
    static_assert(97 * 61 > kMaxDecidingElements);
    std::set<int64_t> counts;
    for (double density : {0.0, 0.3, 1.0, 0.3, 0.01, 0.0}) {
      CAPTURE(density);
      HostTensor x(DType::f32, Shape{r, c});
      std::uniform_real_distribution<float> u(0.f, 1.f);
      for (auto& v : x.span<float>()) v = u(rng) < density ? u(rng) + 0.5f : 0.f;
      if (density == 0.3) x.span<float>()[7] = std::nanf("");  // NaN is non-zero
      std::vector<double> xd(x.as<float>(), x.as<float>() + r * c);
      ref::Dims od;
      auto want = ref::non_zero(xd, {r, c}, od);
      const int64_t count = od[1];
      counts.insert(count);
      if (density == 0.0) CHECK(count == 0);
      if (density == 1.0) CHECK(count == r * c);  // the full bound
      auto out = s->run({{"x", x}});
      REQUIRE(out.at("idx").shape() == Shape{2, count});
      CHECK(ints(out.at("idx")) == want);
      REQUIRE(out.at("flat").shape() == Shape{2 * count});
      CHECK(ints(out.at("flat")) == want);
      REQUIRE(out.at("picked").shape() == Shape{count, c});
      for (int64_t i = 0; i < count; ++i) {
        const float* got = out.at("picked").as<float>() + i * c;
        const float* row = x.as<float>() + want[size_t(i)] * c;
        for (int64_t k = 0; k < c; ++k)
          if (!(got[k] == row[k] || (std::isnan(got[k]) && std::isnan(row[k])))) {
            FAIL("picked row " << i << " col " << k << ": " << got[k] << " vs " << row[k]);
          }
      }
    }
    // One plan of the part up to NonZero (one input shape); the rest once per distinct count.
    CHECK(m->plan_cache_stats().misses == 1);
    auto* plan = s->last_plan();
    REQUIRE(plan != nullptr);
    REQUIRE(plan->counted.size() == 1);
    CHECK(plan->rest_reason.find("NonZero") != std::string::npos);
    REQUIRE(plan->rest != nullptr);
    CHECK(plan->rest->plan_cache_stats().misses == counts.size());
    CHECK(plan->rest->plan_cache_stats().hits == 6 - counts.size());
  }

  TEST_CASE("NonMaxSuppression on run-time inputs of thousands of boxes, counts 0 to the full bound") {
    const int64_t classes = 2;
    auto m = Model::create(test::shared_ctx(), nms_graph(classes));
    CHECK(m->shape_inputs().empty());  // nothing decides shapes by value: NMS's inputs are data
    auto s = m->session();
    std::mt19937 rng(11);
    struct Case {
      int64_t n, max_per_class;
      float iou;
      std::optional<float> score;
    };
    // 4500 boxes: 18 000 box coordinates and 9000 scores, past kMaxDecidingElements.
    for (Case k : {Case{4500, 300, 0.5f, 0.2f}, Case{4500, 300, 0.5f, 2.f},  // score threshold over all: 0 rows
                   Case{3001, 3001, 1.0f, std::nullopt},                  // IoU never > 1: every box, the bound
                   Case{4500, 50, 0.3f, std::nullopt}, Case{7, 2, 0.5f, 0.f}}) {
      CAPTURE(k.n);
      CAPTURE(k.max_per_class);
      HostTensor boxes(DType::f32, Shape{1, k.n, 4}), scores(DType::f32, Shape{1, classes, k.n});
      std::uniform_real_distribution<float> u(0.f, 1.f);
      for (int64_t i = 0; i < k.n; ++i) {
        float x = u(rng) * 100, y = u(rng) * 100, w = 1 + u(rng) * 10, h = 1 + u(rng) * 10;
        float* b = boxes.span<float>().data() + i * 4;
        b[0] = y, b[1] = x, b[2] = y + h, b[3] = x + w;
      }
      for (auto& v : scores.span<float>()) v = u(rng);
      std::vector<float> bv(boxes.as<float>(), boxes.as<float>() + boxes.numel());
      std::vector<float> sv(scores.as<float>(), scores.as<float>() + scores.numel());
      auto want = ref::nms(bv, sv, 1, classes, k.n, k.max_per_class, k.iou, k.score, false);
      const int64_t count = int64_t(want.size() / 3);
      if (k.score && *k.score > 1) CHECK(count == 0);
      if (k.iou >= 1.f) CHECK(count == classes * k.n);  // the full bound
      std::map<std::string, HostTensor> feed{{"boxes", boxes},
                                             {"scores", scores},
                                             {"max_per_class", i64s(Shape{1}, {k.max_per_class})},
                                             {"iou", HostTensor::from<float>(Shape{1}, std::vector<float>{k.iou})}};
      // An absent score threshold: a value under every score (the input is declared, so it is always fed).
      feed["score_threshold"] = HostTensor::from<float>(Shape{1}, std::vector<float>{k.score.value_or(-1.f)});
      auto out = s->run(feed);
      REQUIRE(out.at("selected").shape() == Shape{count, 3});
      CHECK(ints(out.at("selected")) == want);
      REQUIRE(out.at("kept_scores").shape() == Shape{count});
      REQUIRE(out.at("kept_boxes").shape() == Shape{count, 4});
      for (int64_t i = 0; i < count; ++i) {
        const int64_t cl = want[size_t(i * 3 + 1)], bi = want[size_t(i * 3 + 2)];
        CHECK(out.at("kept_scores").as<float>()[i] == sv[size_t(cl * k.n + bi)]);
        for (int q = 0; q < 4; ++q) CHECK(out.at("kept_boxes").as<float>()[i * 4 + q] == bv[size_t(bi * 4 + q)]);
      }
    }
    auto* plan = s->last_plan();
    REQUIRE(plan != nullptr);
    REQUIRE(plan->counted.size() == 1);
    CHECK(plan->counted[0].bound == Shape{classes * 7, 3});  // max_per_class unknown when planning: every box
  }

  TEST_CASE("independent counted ops share one stage: one read of both counts") {
    GraphBuilder b("two", 13);
    auto x = b.input("x", DType::f32, test::sym_shape({-1}, {"n"}));
    auto y = b.input("y", DType::f32, test::sym_shape({-1}, {"m"}));
    auto nx = b.op1("NonZero", {x});
    auto ny = b.op1("NonZero", {y});
    // Each count reaches the other's tail: Concat of both index lists, then a Gather of x by x's.
    auto zero = b.constant("zero", i64s(Shape{1}, {0}));
    b.output(b.op1("Concat", {nx, ny}, {{"axis", int64_t(1)}}), "both");
    b.output(b.op1("Gather", {x, b.op1("Squeeze", {nx, zero})}, {{"axis", int64_t(0)}}), "picked");
    auto m = Model::create(test::shared_ctx(), b.build());
    auto s = m->session();
    for (auto [xs, ys] : {std::pair{std::vector<float>{0, 1, 0, 2}, std::vector<float>{3, 0, 0}},
                          std::pair{std::vector<float>{0, 0, 0, 0}, std::vector<float>{1, 1, 1}}}) {
      auto out = s->run({{"x", HostTensor::from<float>(Shape{4}, xs)}, {"y", HostTensor::from<float>(Shape{3}, ys)}});
      std::vector<int64_t> want;
      std::vector<float> picked;
      for (size_t i = 0; i < xs.size(); ++i)
        if (xs[i] != 0) want.push_back(int64_t(i)), picked.push_back(xs[i]);
      for (size_t i = 0; i < ys.size(); ++i)
        if (ys[i] != 0) want.push_back(int64_t(i));
      CHECK(out.at("both").shape() == Shape{1, int64_t(want.size())});
      CHECK(ints(out.at("both")) == want);
      REQUIRE(out.at("picked").numel() == int64_t(picked.size()));
      for (size_t i = 0; i < picked.size(); ++i) CHECK(out.at("picked").as<float>()[i] == picked[i]);
    }
    REQUIRE(s->last_plan() != nullptr);
    CHECK(s->last_plan()->counted.size() == 2);  // both NonZeros in the first stage
    CHECK(s->last_plan()->rest->graph().nodes.size() >= 2);
  }

  TEST_CASE("shape arithmetic over a count folds when the rest is planned: TopK of k = min(3, count)") {
    // What torchvision's detection heads export: k = ReduceMin(Concat([topk], Shape(kept)[0])).
    GraphBuilder b("topk", 13);
    auto x = b.input("x", DType::f32, test::sym_shape({-1}, {"n"}));
    auto zero = b.constant("zero", i64s(Shape{1}, {0}));
    auto kept = b.op1("Gather", {x, b.op1("Squeeze", {b.op1("NonZero", {x}), zero})}, {{"axis", int64_t(0)}});
    auto count = b.op1("Gather", {b.op1("Shape", {kept}), zero}, {{"axis", int64_t(0)}});
    auto k = b.op1("ReduceMin", {b.op1("Concat", {b.constant("three", i64s(Shape{1}, {3})), count}, {{"axis", int64_t(0)}})},
                   {{"keepdims", int64_t(1)}});
    b.output(b.op("TopK", {kept, k}, {{"axis", int64_t(0)}}, 2)[0], "top");
    auto m = Model::create(test::shared_ctx(), b.build());
    auto s = m->session();
    for (std::vector<float> xs : {std::vector<float>{0, 5, 0, 2, 9, 1, 0}, std::vector<float>{0, 4, 0, 0, 0, 0, 0}}) {
      auto top = s->run({{"x", HostTensor::from<float>(Shape{7}, xs)}}).at("top");
      std::vector<float> want;
      for (float v : xs)
        if (v != 0) want.push_back(v);
      std::sort(want.rbegin(), want.rend());
      want.resize(std::min<size_t>(3, want.size()));
      REQUIRE(top.numel() == int64_t(want.size()));
      for (size_t i = 0; i < want.size(); ++i) CHECK(top.as<float>()[i] == want[i]);
    }
  }

  TEST_CASE("Compress on a run-time condition: a NonZero of it (counted) and a Gather") {
    GraphBuilder b("compress", 11);
    auto x = b.input("x", DType::f32, test::sym_shape({-1, 3}, {"n", ""}));
    auto cond = b.op1("Greater", {b.op1("ReduceSum", {x}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t(0)}}),
                                  b.constant("zero", HostTensor::from<float>(Shape{}, std::vector<float>{0}))});
    b.output(b.op1("Compress", {x, cond}, {{"axis", int64_t(0)}}), "rows");
    b.output(b.op1("Compress", {x, cond}), "flat");  // no axis: positions of the flattened input
    auto m = Model::create(test::shared_ctx(), b.build());
    auto s = m->session();
    std::mt19937 rng(4);
    for (int64_t n : {5000, 3, 5000}) {
      CAPTURE(n);
      HostTensor xv(DType::f32, Shape{n, 3});
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      for (auto& v : xv.span<float>()) v = u(rng);
      const float* xp = xv.as<float>();
      std::vector<float> rows, flat;
      for (int64_t i = 0; i < n; ++i) {
        if (xp[i * 3] + xp[i * 3 + 1] + xp[i * 3 + 2] <= 0) continue;
        rows.insert(rows.end(), xp + i * 3, xp + i * 3 + 3);
        if (i < n * 3) flat.push_back(xp[i]);  // the condition's position i of the flattened x
      }
      auto out = s->run({{"x", xv}});
      REQUIRE(out.at("rows").shape() == Shape{int64_t(rows.size() / 3), 3});
      REQUIRE(out.at("flat").shape() == Shape{int64_t(flat.size())});
      for (size_t i = 0; i < rows.size(); ++i) CHECK(out.at("rows").as<float>()[i] == rows[i]);
      for (size_t i = 0; i < flat.size(); ++i) CHECK(out.at("flat").as<float>()[i] == flat[i]);
    }
    CHECK(s->last_plan()->counted.size() == 2);

    // A run-time condition longer than the axis: refused when planning, naming the node (a true past the
    // end could not be reported from the device).
    GraphBuilder b2("compress_long", 11);
    auto x2 = b2.input("x", DType::f32, test::sym_shape({-1, 3}, {"n", ""}));
    auto y2 = b2.input("y", DType::f32, test::sym_shape({-1}, {"m"}));
    auto c2 = b2.op1("Greater", {y2, b2.constant("zero", HostTensor::from<float>(Shape{}, std::vector<float>{0}))});
    b2.output(b2.op1("Compress", {x2, c2}, {{"axis", int64_t(0)}}), "rows");
    auto m2 = Model::create(test::shared_ctx(), b2.build());
    HostTensor x4(DType::f32, Shape{4, 3}), y4(DType::f32, Shape{4}), y6(DType::f32, Shape{6});
    for (auto* t : {&x4, &y4, &y6})
      for (auto& v : t->span<float>()) v = 1.f;
    CHECK(m2->session()->run({{"x", x4}, {"y", y4}}).at("rows").shape() == Shape{4, 3});
    CHECK_THROWS_WITH(m2->session()->run({{"x", x4}, {"y", y6}}),
                      doctest::Contains("has 6 elements, the axis has 4"));
  }

  TEST_CASE("a counted op's bad input is an error naming the node and the argument") {
    GraphBuilder b("bad_nms", 11);
    auto boxes = b.input("boxes", DType::f32, test::sym_shape({1, -1, 3}, {"", "n", ""}));
    auto scores = b.input("scores", DType::f32, test::sym_shape({1, 1, -1}, {"", "", "n"}));
    b.output(b.op1("NonMaxSuppression", {boxes, scores}), "selected");
    auto m = Model::create(test::shared_ctx(), b.build());
    auto s = m->session();
    HostTensor bx(DType::f32, Shape{1, 5000, 3}), sc(DType::f32, Shape{1, 1, 5000});
    std::string msg;
    try {
      s->run({{"boxes", bx}, {"scores", sc}});
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK(msg.find("(NonMaxSuppression)") != std::string::npos);
    CHECK(msg.find("(boxes) must have shape [batches, boxes, 4], got [1, 5000, 3]") != std::string::npos);
  }

  TEST_CASE("a counted op outside a Model is refused, naming the node") {
    GraphBuilder b("nz", 13);
    auto x = b.input("x", DType::f32, Shape{4});
    b.output(b.op1("NonZero", {x}), "y");
    Graph g = b.build();
    CHECK_THROWS_WITH(prepare(g), doctest::Contains("has a shape decided by run-time data"));
  }
}
