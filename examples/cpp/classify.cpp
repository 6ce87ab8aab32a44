// Embedding cldl in an app, part 1: classify the digits test split with the zoo's CNN.
// Usage: cldl_example_classify models/zoo/digits_cnn   (device: CLDL_DEVICE, else GPU, accelerator, CPU)
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "models/model.hpp"
#include "models/npy.hpp"

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "models/zoo/digits_cnn";
  cldl::HostTensor x = cldl::graph::read_npy(dir + "/x_test.npy");  // [N, 1, 8, 8] f32
  cldl::HostTensor y = cldl::graph::read_npy(dir + "/y_test.npy");  // [N] int64
  const int64_t n = x.shape()[0];

  auto ctx = cldl::Context::create();
  cldl::graph::LoadOptions opts;
  opts.prepare.dims["N"] = n;  // the model's batch dimension is symbolic
  auto model = cldl::graph::load_onnx_model(ctx, dir + "/model.onnx", opts);
  auto session = model->session();
  cldl::HostTensor logits = session->run({{"image", x}}).at("logits");  // [N, 10]

  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.as<float>() + i * 10;
    correct += std::max_element(row, row + 10) - row == y.as<int64_t>()[i];
  }
  std::printf("accuracy %.4f (%lld/%lld) on %s\n", double(correct) / double(n), (long long)correct, (long long)n,
              ctx->device().info.name.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cldl_example_classify: %s\n", e.what());
  return 1;
}
