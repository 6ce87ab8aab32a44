// Softmax / LogSoftmax against the reference over every axis (positive and negative), odd sizes,
// large-magnitude inputs (stability). Tolerance: 1e-5 relative + 1e-6 absolute (LogSoftmax 1e-5 abs).
#include <cmath>

#include "layers/softmax.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/cnn_ref.hpp"

using namespace cldl;
using namespace cldl::test;

TEST_SUITE("softmax") {

TEST_CASE("Softmax and LogSoftmax over every axis") {
  for (Shape s : {Shape{1, 1000}, Shape{3, 7, 13}, Shape{2, 5, 7, 13}, Shape{1031}}) {
    for (int64_t ax = -int64_t(s.rank()); ax < int64_t(s.rank()); ++ax) {
      for (bool lg : {false, true}) {
        CAPTURE(s.str());
        CAPTURE(ax);
        CAPTURE(lg);
        auto x = random_floats(s.numel(), uint32_t(ax + 10), -30.0f, 30.0f);
        x[0] = 80.0f;  // exp overflows without the max subtraction
        auto op = Softmax::create(ctx(), 0, {s, ax, lg});
        auto got = down<float>(run_op(*op, {up(x, s)}, s));
        auto want = ref::softmax(x, s.dims, int(ax < 0 ? ax + s.rank() : ax), lg);
        CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-5, lg ? 1e-5 : 1e-6);
      }
    }
  }
}

TEST_CASE("bad softmax configurations name the op, the argument and the value") {
  expect_invalid([] { Softmax::validate({Shape{3, 4}, 2}); }, {"Softmax", "axis", "2", "rank 2"});
  expect_invalid([] { Softmax::validate({Shape{3, 4}, -3, true}); }, {"LogSoftmax", "axis", "-3"});
}

}  // TEST_SUITE
