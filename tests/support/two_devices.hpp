// Two PoCL CPU devices in one context for the tests of suite multi-device (ctest multi_device runs them with
// POCL_DEVICES="pthread pthread" and CLDL_TEST_MULTI_DEVICE=1), or null, the reason said, when this process has
// fewer.
#pragma once
#include <cstdlib>
#include <memory>

#include <doctest/doctest.h>

#include "runtime/context.hpp"

namespace cldl::test {

inline std::shared_ptr<Context> two_devices() {
  if (!std::getenv("CLDL_TEST_MULTI_DEVICE")) {
    MESSAGE(
        "skipped: the two-device tests run under ctest's multi_device (POCL_DEVICES=\"pthread pthread\", "
        "CLDL_TEST_MULTI_DEVICE=1)");
    return nullptr;
  }
  static std::shared_ptr<Context> two = [] {
    auto devs = select_devices("cpu:all");
    if (devs.size() < 2) return std::shared_ptr<Context>();
    devs.resize(2);
    return std::make_shared<Context>(devs);
  }();
  if (!two) MESSAGE("skipped: this machine shows one CPU device; run with POCL_DEVICES=\"pthread pthread\"");
  return two;
}

}  // namespace cldl::test
