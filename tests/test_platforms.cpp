// The quirks table (runtime/device.cpp apply_quirks) against what the driver in use really does, and
// the driver behaviours cldl handles without a quirk; run per OpenCL implementation by
// `tools/test --all-platforms`.
#include <doctest/doctest.h>

#include <vector>

#include "layers/gemm.hpp"
#include "runtime/tuning.hpp"
#include "tests/reference/gemm_ref.hpp"
#include "tests/support/test_util.hpp"

using namespace cldl;

TEST_SUITE("platforms") {
TEST_CASE("profiling timestamps are ordered; a queued time of 0 needs no quirk") {
  auto& c = test::ctx();
  const auto& info = c.device().info;
  INFO(info.platform_name << " / " << info.name << " driver " << info.driver_version);
  cl::CommandQueue q = c.queue(0, 7, true);
  std::vector<float> host(4097, 1.5f);
  cl::Buffer buf(c.cl(), CL_MEM_READ_WRITE, host.size() * sizeof(float));
  cl::Event ev;
  REQUIRE(q.enqueueWriteBuffer(buf, CL_FALSE, 0, host.size() * sizeof(float), host.data(), nullptr, &ev) == CL_SUCCESS);
  REQUIRE(ev.wait() == CL_SUCCESS);
  cl_ulong queued = 0, submit = 0, start = 0, end = 0;
  REQUIRE(ev.getProfilingInfo(CL_PROFILING_COMMAND_QUEUED, &queued) == CL_SUCCESS);
  REQUIRE(ev.getProfilingInfo(CL_PROFILING_COMMAND_SUBMIT, &submit) == CL_SUCCESS);
  REQUIRE(ev.getProfilingInfo(CL_PROFILING_COMMAND_START, &start) == CL_SUCCESS);
  REQUIRE(ev.getProfilingInfo(CL_PROFILING_COMMAND_END, &end) == CL_SUCCESS);
  INFO("queued " << queued << " submit " << submit << " start " << start << " end " << end);
  CHECK(start > 0);
  CHECK(start <= end);
  // Some drivers report 0 for the queued time; the Profiler then uses the start time (profiler.cpp).
  if (queued != 0) {
    CHECK(queued <= submit);
    CHECK(submit <= start);
  }
  Profiler prof;
  prof.add("write", ev);
  REQUIRE(prof.records().size() == 1);
  CHECK(prof.records()[0].start_ns == start);
  CHECK(prof.chrome_trace_json().find("\"write\"") != std::string::npos);
}

TEST_CASE("quirk prefers_wide_vectors: the own GEMM's default columns follow it; every width is correct") {
  auto& c = test::ctx();
  const auto& info = c.device().info;
  INFO(info.platform_name << " / " << info.name << " driver " << info.driver_version);
  // The table sets it for the CPU devices of PoCL and Intel's CPU runtime, and nowhere else.
  std::string plat = info.platform_name;
  for (auto& ch : plat) ch = static_cast<char>(std::tolower(ch));
  const bool listed = info.type == DeviceType::cpu && (plat.find("portable computing language") != std::string::npos ||
                                                       plat.find("intel") != std::string::npos);
  CHECK(info.quirks.prefers_wide_vectors == listed);
  tuning::ScopedEnabled heuristic_only(false);
  GemmConfig cfg;
  cfg.M = 29, cfg.N = 37, cfg.K = 23, cfg.provider = GemmProvider::own;
  CHECK((Gemm::create(c, 0, cfg)->config().own.nr == 16) == info.quirks.prefers_wide_vectors);
  // The vector widths the quirk chooses between give the reference's numbers on this driver.
  HostTensor a = test::random_tensor({29, 23}, 41), b = test::random_tensor({23, 37}, 42);
  std::vector<float> want(29 * 37);
  ref::gemm(cfg, a.as<float>(), b.as<float>(), want.data(), nullptr);
  for (int width : {4, 8, 16}) {
    CAPTURE(width);
    cfg.own.nr = width;
    auto g = Gemm::create(c, 0, cfg);
    Tensor out = c.alloc({29, 37}, DType::f32);
    auto ec = c.exec();
    g->run(c.upload(a), c.upload(b), out, ec);
    HostTensor got = c.download(out);
    CLDL_CHECK_CLOSE(got.as<float>(), want.data(), want.size(), 1e-4, 1e-5 * 23);
  }
}
}
