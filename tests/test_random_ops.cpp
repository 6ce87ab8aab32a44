// Bernoulli, checked statistically (its numbers are its own, not numpy's): the frequency of ones per
// probability within 5 standard deviations over many draws, p = 0 and 1 exact, the same seed giving the
// same first run, successive runs differing, every output dtype, and bad dtypes naming the op.
#include <cmath>

#include "layers/random.hpp"
#include "models/builder.hpp"
#include "reference/cnn_harness.hpp"
#include "support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::test;

TEST_SUITE("random_ops") {

TEST_CASE("Bernoulli: frequencies match the probabilities; p = 0 and 1 exact; seeds reproduce") {
  const std::vector<float> probs = {0.0f, 0.01f, 0.25f, 0.5f, 0.9f, 1.0f, 0.333f};
  const int64_t per = 20011;  // draws per probability (odd, not a power of two)
  std::vector<float> p;
  for (float v : probs) p.insert(p.end(), size_t(per), v);
  const Shape s{int64_t(probs.size()), per};
  auto op = Bernoulli::create(ctx(), 0, {s, DType::f32, DType::f32, 1234});
  auto first = down<float>(run_op(*op, {up(p, s)}, s));
  for (size_t k = 0; k < probs.size(); ++k) {
    CAPTURE(probs[k]);
    double ones = 0;
    for (int64_t j = 0; j < per; ++j) {
      const float v = first[k * size_t(per) + size_t(j)];
      REQUIRE((v == 0.0f || v == 1.0f));
      ones += v;
    }
    const double q = probs[k], sd = std::sqrt(per * q * (1 - q));
    if (q == 0.0 || q == 1.0) CHECK(ones == q * per);
    else CHECK(std::fabs(ones - q * per) <= 5 * sd);
  }
  // Neighbouring elements are not correlated: pairs of p = 0.5 draws agree about half the time.
  double agree = 0;
  const size_t base = 3 * size_t(per);
  for (int64_t j = 0; j + 1 < per; ++j) agree += first[base + size_t(j)] == first[base + size_t(j) + 1];
  CHECK(std::fabs(agree - 0.5 * (per - 1)) <= 5 * std::sqrt(0.25 * (per - 1)));
  auto second = down<float>(run_op(*op, {up(p, s)}, s));
  CHECK(second != first);  // the next run draws fresh numbers
  auto again = Bernoulli::create(ctx(), 0, {s, DType::f32, DType::f32, 1234});
  CHECK(down<float>(run_op(*again, {up(p, s)}, s)) == first);  // the same seed, the same first run
  auto other = Bernoulli::create(ctx(), 0, {s, DType::f32, DType::f32, 1235});
  CHECK(down<float>(run_op(*other, {up(p, s)}, s)) != first);
}

TEST_CASE("Bernoulli writes 0 / 1 in every output dtype; f64 probabilities; bad dtypes name the op") {
  const Shape s{3, 5};
  std::vector<float> p(15);
  for (size_t i = 0; i < p.size(); ++i) p[i] = i % 3 == 0 ? 0.0f : i % 3 == 1 ? 1.0f : 0.5f;
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::boolean, DType::u8, DType::i16, DType::i32, DType::i64}) {
    CAPTURE(to_string(t));
    auto op = Bernoulli::create(ctx(), 0, {s, DType::f32, t, 7});
    HostTensor y = ctx().download(run_op(*op, {up(p, s)}, s, t));
    auto v = graph::to_doubles(y);
    for (size_t i = 0; i < v.size(); ++i) {
      if (p[i] == 0.0f) REQUIRE(v[i] == 0.0);
      else if (p[i] == 1.0f) REQUIRE(v[i] == 1.0);
      else REQUIRE((v[i] == 0.0 || v[i] == 1.0));
    }
  }
  if (supports_dtype(ctx().device(0).info, DType::f64)) {
    std::vector<double> pd(p.begin(), p.end());
    auto op = Bernoulli::create(ctx(), 0, {s, DType::f64, DType::f64, 7});
    auto v = down<double>(run_op(*op, {up(pd, s)}, s, DType::f64));
    for (size_t i = 0; i < v.size(); ++i)
      if (p[i] != 0.5f) REQUIRE(v[i] == double(p[i]));
  }
  expect_invalid([] { Bernoulli::validate({Shape{2}, DType::i32, DType::f32, 0}); }, {"Bernoulli", "i32"});
  expect_invalid([] { Bernoulli::validate({Shape{2}, DType::f32, DType::f8e4m3fn, 0}); }, {"Bernoulli", "output"});
}

TEST_CASE("Bernoulli in a graph: seed and dtype attributes") {
  using namespace graph;
  GraphBuilder b("bern", 15);
  auto x = b.input("p", DType::f32, Shape{64});
  b.output(b.op1("Bernoulli", {x}, {{"seed", 3.0f}, {"dtype", int64_t(7)}}), "y");  // 7: int64
  std::vector<float> p(64, 1.0f);
  for (size_t i = 0; i < 32; ++i) p[i] = 0.0f;
  auto out = run_graph(b.build(), {{"p", HostTensor::from<float>(Shape{64}, p)}});
  REQUIRE(out.at("y").dtype() == DType::i64);
  for (size_t i = 0; i < 64; ++i) CHECK(out.at("y").as<int64_t>()[i] == (i < 32 ? 0 : 1));
}

}  // TEST_SUITE
