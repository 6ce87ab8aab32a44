// The quirks table (runtime/device.cpp apply_quirks) against what the driver in use really does; run
// per OpenCL implementation by `tools/test --all-platforms`.
#include <doctest/doctest.h>

#include <vector>

#include "tests/support/test_util.hpp"

using namespace cldl;

TEST_SUITE("platforms") {
TEST_CASE("quirk no_profiling_queued_time matches the driver's profiling timestamps") {
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
  if (info.quirks.no_profiling_queued_time) {
    CHECK(queued == 0);  // the quirk is set only where the driver really reports 0
  } else {
    CHECK(queued > 0);
    CHECK(queued <= submit);
    CHECK(submit <= start);
  }
}
}
