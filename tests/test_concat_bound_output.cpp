// The memory plan's in-place Concat on a graph output (models/memory_plan.cpp, Session::set_slot_tensor):
// the parts' producers write into the output's bytes, and when the caller binds the output to a buffer of
// its own (Session::bind_output, as Generator does with an RNN's state outputs) into that buffer, at the
// binding's offset, touching nothing around it; unbound again, into the session's own bytes. The inputs
// that cannot be parts (a graph input) are copied there. Each case checks that the Concat is in place (so a
// plan that copies cannot pass silently) and compares with a host reference.
#include <cmath>

#include "tests/support/graph_util.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;

TEST_SUITE("concat_bound_output") {
  TEST_CASE("a Concat that is a graph output writes its parts in place, into a bound buffer too") {
    // y = Concat(Sigmoid(x), x, Tanh(x)) along axis 0; x [1, 4, 5] (odd last dim; 80-byte parts).
    const Shape xs{1, 4, 5};
    const int64_t P = xs.numel();
    GraphBuilder b;
    auto x = b.input("x", DType::f32, xs);
    auto y = b.op1("Concat", {b.op1("Sigmoid", {x}), x, b.op1("Tanh", {x})}, {{"axis", int64_t(0)}});
    b.output(y);  // the Concat's own value (a renamed output would be an Identity: a view, copied when bound)
    const std::string yn = y.name;
    auto m = test::compile_graph(b.build());
    int in_place = 0;
    for (auto& line : m->describe()) in_place += line.find("in place, 1 input(s) copied in") != std::string::npos;
    CHECK(in_place == 1);  // x is a graph input: copied; the Sigmoid and Tanh write their places
    auto want = [&](const HostTensor& h) {
      std::vector<float> w(size_t(3 * P));
      for (int64_t i = 0; i < P; ++i) {
        const float v = h.as<float>()[i];
        w[size_t(i)] = 1.0f / (1.0f + std::exp(-v)), w[size_t(P + i)] = v, w[size_t(2 * P + i)] = std::tanh(v);
      }
      return w;
    };
    auto s = m->session();
    HostTensor x1 = test::random_tensor(xs, 5, -3, 3);
    auto out = s->run({{"x", x1}});
    REQUIRE(out[yn].shape() == Shape{3, 4, 5});
    CLDL_CHECK_CLOSE(out[yn].as<float>(), want(x1).data(), size_t(3 * P), 1e-6, 1e-6);

    // Bound at a byte offset inside a larger buffer whose other bytes hold a sentinel.
    const int64_t lead = 12, tail = 7;
    Context& cx = *test::shared_ctx();
    Tensor buf = cx.upload(HostTensor::from<float>(Shape{lead + 3 * P + tail},
                                                   std::vector<float>(size_t(lead + 3 * P + tail), -7.0f)));
    Tensor bound = buf;
    bound.offset_bytes = size_t(lead) * sizeof(float);
    bound.shape = Shape{3, 4, 5};
    s->bind_output(yn, bound);
    HostTensor x2 = test::random_tensor(xs, 6, -3, 3);
    s->write_input("x", x2);
    s->enqueue();
    check(s->last_run().wait(), "clWaitForEvents", "test run");
    HostTensor all = cx.download(buf);
    const float* a = all.as<float>();
    for (int64_t i = 0; i < lead; ++i) CHECK(a[i] == -7.0f);
    for (int64_t i = 0; i < tail; ++i) CHECK(a[lead + 3 * P + i] == -7.0f);
    CLDL_CHECK_CLOSE(a + lead, want(x2).data(), size_t(3 * P), 1e-6, 1e-6);
    // read_output reads the bound buffer.
    CLDL_CHECK_CLOSE(s->read_output(yn).as<float>(), want(x2).data(), size_t(3 * P), 1e-6, 1e-6);

    // Unbound: the session's own bytes again; the app's buffer keeps the last bound run's values.
    s->bind_output(yn, Tensor{});
    HostTensor x3 = test::random_tensor(xs, 7, -3, 3);
    out = s->run({{"x", x3}});
    CLDL_CHECK_CLOSE(out[yn].as<float>(), want(x3).data(), size_t(3 * P), 1e-6, 1e-6);
    all = cx.download(buf);
    CLDL_CHECK_CLOSE(all.as<float>() + lead, want(x2).data(), size_t(3 * P), 1e-6, 1e-6);
  }

  TEST_CASE("a bound Concat output at batch 2 (strided parts) is copied into the bound buffer") {
    // Concat along axis 1 with batch 2: the parts are strided blocks, so the Concat copies them; bound or not
    // the output is right.
    const Shape xs{2, 3, 4};
    GraphBuilder b;
    auto x = b.input("x", DType::f32, xs);
    auto yv = b.op1("Concat", {b.op1("Neg", {x}), b.op1("Abs", {x})}, {{"axis", int64_t(1)}});
    b.output(yv);
    auto m = test::compile_graph(b.build());
    auto s = m->session();
    const std::string yn = yv.name;
    Context& cx = *test::shared_ctx();
    Tensor buf = cx.alloc(Shape{2, 6, 4}, DType::f32);
    s->bind_output(yn, buf);
    HostTensor x1 = test::random_tensor(xs, 8, -3, 3);
    s->write_input("x", x1);
    s->enqueue();
    HostTensor y = s->read_output(yn);
    std::vector<float> w(48);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 12; ++i) {
        const float v = x1.as<float>()[n * 12 + i];
        w[size_t(n * 24 + i)] = -v, w[size_t(n * 24 + 12 + i)] = std::fabs(v);
      }
    CLDL_CHECK_CLOSE(y.as<float>(), w.data(), w.size(), 0, 0);
    CLDL_CHECK_CLOSE(cx.download(buf).as<float>(), w.data(), w.size(), 0, 0);
  }
}
