// ONNX Bernoulli on layers/random.hpp. The `seed` attribute seeds the stream; without one, a seed is drawn
// from std::random_device when the model is compiled. The `dtype` attribute picks the output type
// (default: the input's).
#include <cstring>
#include <random>

#include "layers/random.hpp"
#include "models/onnx_import.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

BernoulliConfig bernoulli_config(const InferCtx* ic, const Node& n, Shape s, DType dt) {
  BernoulliConfig b{std::move(s), dt, dt, 0};
  if (n.has("dtype")) {
    try {
      b.out_dtype = dtype_from_onnx(int(n.attr_i("dtype", 1)), "Bernoulli 'dtype'");
    } catch (const Error& e) {
      if (ic) ic->error("{}", e.what());
      throw;
    }
  }
  if (n.has("seed")) {  // a float attribute: its bits seed the stream
    const float f = n.attr_f("seed", 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    b.seed = bits;
  } else {
    b.seed = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  }
  return b;
}

void infer_bernoulli(InferCtx& c) {
  auto b = bernoulli_config(&c, c.node, c.shape(0), c.input(0).dtype);
  c.set(0, b.out_dtype, checked(c, [&] { return Bernoulli::validate(b); }));
}

std::unique_ptr<NodeKernel> lower_bernoulli(LowerCtx& c) {
  auto b = bernoulli_config(nullptr, c.node, c.in[0].shape.to_shape(), c.in[0].dtype);
  return wrap(Bernoulli::create(c.ctx, c.device, b), c);
}

const OpRegistration kRandomOps{
    {.type = "Bernoulli", .since = 15, .family = "random", .infer = infer_bernoulli, .lower = lower_bernoulli},
};

}  // namespace
}  // namespace cldl::graph
