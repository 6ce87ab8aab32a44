// Uses the installed cldl: a 3x2 * 2x4 GEMM on the default device, checked by hand.
#include <cldl/layers/gemm.hpp>
#include <cldl/runtime/cldl.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  auto ctx = cldl::Context::create();
  std::vector<float> a{1, 2, 3, 4, 5, 6}, b{1, 0, 2, -1, 0, 1, 1, 3};
  auto da = ctx->upload(cldl::HostTensor::from<float>({3, 2}, a));
  auto db = ctx->upload(cldl::HostTensor::from<float>({2, 4}, b));
  auto dc = ctx->alloc({3, 4}, cldl::DType::f32);
  cldl::GemmConfig cfg;
  cfg.M = 3; cfg.N = 4; cfg.K = 2;
  auto gemm = cldl::Gemm::create(*ctx, 0, cfg);
  auto ec = ctx->exec();
  gemm->run(da, db, dc, ec);
  auto c = ctx->download(dc);
  for (int m = 0; m < 3; ++m)
    for (int n = 0; n < 4; ++n) {
      float want = a[m * 2] * b[n] + a[m * 2 + 1] * b[4 + n];
      if (std::fabs(c.as<float>()[m * 4 + n] - want) > 1e-5f) { std::printf("mismatch at %d,%d\n", m, n); return 1; }
    }
  std::printf("consumer ok on %s\n", ctx->device().info.name.c_str());
  return 0;
}
