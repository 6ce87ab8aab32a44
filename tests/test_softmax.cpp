// Softmax / LogSoftmax against the reference over every axis (positive and negative), odd sizes,
// large-magnitude inputs (stability). Tolerance: 1e-5 relative + 1e-6 absolute (LogSoftmax 1e-5 abs).
#include <cmath>
#include <limits>

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

TEST_CASE("Softmax and LogSoftmax rows: serial and work-group kernels over short, odd and long rows") {
  // Both last-axis kernels on any device (automatic picks one per device type): rows of length 1, 3, 8,
  // 13, 64, 1000, one row and many, -inf entries (masked attention) and a row with one finite entry.
  const float inf = std::numeric_limits<float>::infinity();
  for (Shape s : {Shape{1, 1}, Shape{5, 1}, Shape{1, 3}, Shape{7, 3}, Shape{4, 8}, Shape{3, 5, 13}, Shape{4, 4, 64, 64},
                  Shape{1, 1000}, Shape{37, 1000}, Shape{2, 4099}}) {
    for (SoftmaxRows rows : {SoftmaxRows::serial, SoftmaxRows::work_group, SoftmaxRows::automatic}) {
      for (bool lg : {false, true}) {
        CAPTURE(s.str());
        CAPTURE(int(rows));
        CAPTURE(lg);
        auto x = random_floats(s.numel(), uint32_t(s.numel() + 3), -30.0f, 30.0f);
        const int64_t len = s.dims.back();
        if (len > 2) {
          for (size_t i = 1; i < x.size(); i += 3) x[i] = -inf;                         // masked entries
          for (int64_t k = 0; k < len; ++k) x[size_t(k)] = k == len - 1 ? 5.0f : -inf;  // one finite entry
        }
        x.back() = 80.0f;  // exp overflows without the max subtraction
        auto op = Softmax::create(ctx(), 0, {s, -1, lg, rows});
        auto got = down<float>(run_op(*op, {up(x, s)}, s));
        auto want = ref::softmax(x, s.dims, int(s.rank() - 1), lg);
        for (auto* v : {&got, &want})  // -inf (LogSoftmax of a masked entry) must match -inf
          for (float& f : *v)
            if (f == -inf) f = -1e30f;
        CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-5, lg ? 1e-5 : 1e-6);
      }
    }
  }
}

TEST_CASE("LogSoftmax of large numbers keeps x - max exact (ONNX test_logsoftmax_large_number)") {
  // x - (max + log(sum)) rounds max + log(sum) at 1e4's float spacing; (x - max) - log(sum) does not.
  const Shape s{2, 4};
  const std::vector<float> x{0, 1, 2, 3, 10000, 10001, 10002, 10003};
  for (SoftmaxRows rows : {SoftmaxRows::serial, SoftmaxRows::work_group}) {
    auto op = Softmax::create(ctx(), 0, {s, -1, true, rows});
    auto got = down<float>(run_op(*op, {up(x, s)}, s));
    auto want = ref::softmax(x, s.dims, 1, true);
    CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-6, 1e-6);
  }
  // Rows shorter than 8, eight at a time (one per vector lane).
  const Shape s8{16, 3};
  std::vector<float> x8(48);
  for (size_t i = 0; i < x8.size(); ++i) x8[i] = 10000.0f + float(i % 3) + float(i / 24);
  auto op = Softmax::create(ctx(), 0, {s8, -1, true, SoftmaxRows::serial});
  auto got = down<float>(run_op(*op, {up(x8, s8)}, s8));
  auto want = ref::softmax(x8, s8.dims, 1, true);
  CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-6, 1e-6);
}

TEST_CASE("bad softmax configurations name the op, the argument and the value") {
  expect_invalid([] { Softmax::validate({Shape{3, 4}, 2}); }, {"Softmax", "axis", "2", "rank 2"});
  expect_invalid([] { Softmax::validate({Shape{3, 4}, -3, true}); }, {"LogSoftmax", "axis", "-3"});
}

}  // TEST_SUITE
