// One op object and one context used from several threads at once: every result checked.
#include <atomic>
#include <thread>

#include "layers/gemm.hpp"
#include "support/test_util.hpp"

using namespace cldl;
using cldl::test::ctx;

TEST_SUITE("threads") {
TEST_CASE("one Gemm op shared by four threads, each on its own queue and data") {
 // Both providers (the automatic choice is CLBlast on a non-CPU device such as Intel's FPGA emulator);
 // the own kernel with trans_b packs B into the op's own scratch (no workspace given).
 for (GemmProvider provider : {GemmProvider::own, GemmProvider::clblast})
 for (bool trans_b : {false, true}) {
  CAPTURE(int(provider));
  CAPTURE(trans_b);
  GemmConfig cfg;
  cfg.M = 19;
  cfg.N = 23;
  cfg.K = 17;
  cfg.trans_b = trans_b;
  cfg.provider = provider;
  auto gemm = Gemm::create(ctx(), 0, cfg);
  if (trans_b && provider == GemmProvider::own) REQUIRE(gemm->algorithm().find("packB") != std::string::npos);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int it = 0; it < 5; ++it) {
          auto a = cldl::test::random_tensor({19, 17}, 100 + t * 10 + it);
          auto b = trans_b ? cldl::test::random_tensor({23, 17}, 200 + t * 10 + it)
                           : cldl::test::random_tensor({17, 23}, 200 + t * 10 + it);
          Tensor da = ctx().upload(a), db = ctx().upload(b), dc = ctx().alloc({19, 23}, DType::f32);
          ExecutionContext ec(ctx().queue(0, 20 + t));
          gemm->run(da, db, dc, ec);
          ec.queue.finish();  // download() reads on queue 0: this thread's queue must be done first
          HostTensor c = ctx().download(dc);
          for (int m = 0; m < 19; ++m)
            for (int n = 0; n < 23; ++n) {
              double want = 0;
              for (int k = 0; k < 17; ++k)
                want += double(a.as<float>()[m * 17 + k]) * b.as<float>()[trans_b ? n * 17 + k : k * 23 + n];
              if (std::fabs(want - c.as<float>()[m * 23 + n]) > 1e-4) bad++;
            }
        }
      } catch (const std::exception& e) {
        MESSAGE(e.what());
        bad++;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(bad == 0);
 }
}
}
