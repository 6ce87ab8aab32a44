// Data movement against the reference: Transpose (every perm of rank 3 and 4), Concat (N inputs, every
// axis), Split, Slice (negative starts/ends/axes/steps, clamping), Pad (constant/reflect/edge/wrap), Expand,
// Tile, Gather (i32/i64, negative indices, every axis), Resize (nearest with every coordinate and
// nearest mode; linear; cubic with and without exclude_outside; tf_crop_and_resize with roi inside,
// reversed and outside the input; antialias; align_corners with a non-integral in * scale). Tolerance:
// exact, except Resize linear / cubic (1e-5 relative + 1e-5 absolute).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>

#include "layers/data.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/cnn_ref.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::test;

namespace {
void check_exact(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 0.0, 0.0);
}
}  // namespace

TEST_SUITE("data") {

TEST_CASE("Transpose: every permutation of rank 3 and 4, and other dtypes") {
  for (Shape s : {Shape{3, 7, 13}, Shape{2, 3, 5, 7}}) {
    auto x = random_floats(s.numel(), 1);
    Tensor dx = up(x, s);
    std::vector<int64_t> perm(s.rank());
    std::iota(perm.begin(), perm.end(), 0);
    do {
      TransposeConfig cfg{s, DType::f32, perm};
      Shape so = Transpose::validate(cfg);
      ref::Dims od;
      auto want = ref::transpose(x, s.dims, std::vector<int>(perm.begin(), perm.end()), od);
      REQUIRE(so == Shape(od));
      check_exact(down<float>(run_op(*Transpose::create(ctx(), 0, cfg), {dx}, so)), want);
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  // Default perm (reverse) on i64 and u8.
  Shape s{3, 5, 2};
  std::vector<int64_t> xi(s.numel());
  std::iota(xi.begin(), xi.end(), -7);
  TransposeConfig cfg{s, DType::i64, {}};
  auto got = down<int64_t>(run_op(*Transpose::create(ctx(), 0, cfg), {up(xi, s)}, Shape{2, 5, 3}, DType::i64));
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 5; ++b)
      for (int c = 0; c < 2; ++c) REQUIRE(got[(c * 5 + b) * 3 + a] == xi[(a * 5 + b) * 2 + c]);
  std::vector<uint8_t> xb(s.numel());
  for (size_t i = 0; i < xb.size(); ++i) xb[i] = uint8_t(i * 7);
  auto gb = down<uint8_t>(run_op(*Transpose::create(ctx(), 0, {s, DType::u8, {1, 0, 2}}), {up(xb, s)}, Shape{5, 3, 2},
                                 DType::u8));
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 5; ++b)
      for (int c = 0; c < 2; ++c) REQUIRE(gb[(b * 3 + a) * 2 + c] == xb[(a * 5 + b) * 2 + c]);
}

TEST_CASE("StridedCopy: element, rows and tiles kernels on transposes, slices and every element size") {
  // Each kernel that applies to an iteration, forced on any device, against the reference transpose:
  // odd sizes, partial tiles and runs, batch 1, rank 1 to 6.
  struct Case {
    Shape s;
    std::vector<int64_t> perm;
  };
  using Kind = CopyPlan::Kind;
  for (const Case& c :
       {Case{Shape{37}, {0}}, Case{Shape{1, 1}, {1, 0}}, Case{Shape{3, 1}, {1, 0}}, Case{Shape{17, 33}, {1, 0}},
        Case{Shape{1, 40, 3, 35}, {0, 2, 1, 3}}, Case{Shape{2, 19, 3, 21}, {0, 2, 3, 1}},
        Case{Shape{2, 5, 33, 18}, {0, 3, 1, 2}}, Case{Shape{2, 3, 5, 7, 11, 13}, {5, 3, 1, 0, 2, 4}},
        Case{Shape{3, 4, 5, 2, 7}, {1, 0, 2, 4, 3}}}) {
    for (DType dt : {DType::f32, DType::u8, DType::f16, DType::i64}) {
      CAPTURE(c.s.str());
      CAPTURE(to_string(dt));
      const size_t r = c.s.rank();
      auto is = contiguous_strides(c.s);
      Shape so;
      std::vector<int64_t> src(r);
      for (size_t i = 0; i < r; ++i) {
        src[i] = is[c.perm[i]];
        so.dims.push_back(c.s[c.perm[i]]);
      }
      StridedCopy copy(ctx(), 0, dt);
      const Iteration it = collapse("test", so.dims, {src, contiguous_strides(so)});
      // Byte patterns: the copies move elements of 1, 2, 4 and 8 bytes without looking at them.
      const int64_t n = c.s.numel();
      const size_t esz = dtype_size(dt);
      std::vector<uint8_t> x(size_t(n) * esz);
      for (size_t i = 0; i < x.size(); ++i) x[i] = uint8_t(i * 131 + i / 251);
      HostTensor hx(dt, c.s);
      std::memcpy(hx.data(), x.data(), x.size());
      Tensor dx = ctx().upload(hx);
      std::vector<uint8_t> want(x.size());
      for (int64_t o = 0; o < n; ++o) {
        int64_t rem = o, off = 0;
        for (size_t i = r; i-- > 0;) {
          off += (rem % so[i]) * src[i];
          rem /= so[i];
        }
        std::memcpy(&want[size_t(o) * esz], &x[size_t(off) * esz], esz);
      }
      for (Kind k : {Kind::element, Kind::rows, Kind::tiles}) {
        CAPTURE(int(k));
        CopyPlan plan;
        try {
          plan = copy.plan(it, k);
        } catch (const Error&) {
          continue;  // the kernel does not apply to this iteration
        }
        Tensor y = ctx().alloc(so, dt);
        auto ec = ctx().exec();
        copy.enqueue(plan, dx, 0, y, 0, ec);
        ctx().finish();
        HostTensor hy = ctx().download(y);
        CHECK(std::memcmp(hy.data(), want.data(), want.size()) == 0);
      }
    }
  }
}

TEST_CASE("Concat of N inputs along every axis, and Split back") {
  const Shape base{2, 3, 7, 5};
  for (int64_t ax = -4; ax < 4; ++ax) {
    const int a = int(ax < 0 ? ax + 4 : ax);
    std::vector<Shape> shapes;
    std::vector<std::vector<float>> xs;
    std::vector<Tensor> ts;
    for (int64_t k : {1, 3, 2}) {
      Shape s = base;
      s[a] = k;
      shapes.push_back(s);
      xs.push_back(random_floats(s.numel(), uint32_t(k * 10 + a)));
      ts.push_back(up(xs.back(), s));
    }
    ConcatConfig cfg{shapes, DType::f32, ax};
    Shape so = Concat::validate(cfg);
    REQUIRE(so[a] == 6);
    auto y = run_op(*Concat::create(ctx(), 0, cfg), ts, so);
    auto got = down<float>(y);
    // Reference: output coordinate c reads input k at c[a] - offset_k.
    std::vector<float> want(so.numel());
    for (int64_t i = 0; i < so.numel(); ++i) {
      auto c = ref::unravel(i, so.dims);
      int64_t pos = c[a];
      size_t k = 0;
      while (pos >= shapes[k][a]) pos -= shapes[k++][a];
      c[a] = pos;
      int64_t src = 0;
      for (int d = 0; d < 4; ++d) src = src * shapes[k][d] + c[d];
      want[i] = xs[k][src];
    }
    check_exact(got, want);
    // Split with explicit sizes restores the inputs.
    SplitConfig sc{so, DType::f32, ax, {1, 3, 2}};
    auto outs_shapes = Split::validate(sc);
    REQUIRE(outs_shapes == shapes);
    auto split = Split::create(ctx(), 0, sc);
    std::vector<Tensor> outs;
    for (auto& s : outs_shapes) outs.push_back(ctx().alloc(s, DType::f32));
    auto ec = ctx().exec();
    std::vector<Tensor> in{y};
    split->enqueue(in, outs, nullptr, ec);
    ctx().finish();
    for (size_t k = 0; k < outs.size(); ++k) check_exact(down<float>(outs[k]), xs[k]);
  }
  // num_outputs: 7 along axis 2 into 3 parts gives 3, 3, 1.
  auto parts = Split::validate({base, DType::f32, 2, {}, 3});
  REQUIRE(parts.size() == 3);
  CHECK(parts[0][2] == 3);
  CHECK(parts[2][2] == 1);
}

TEST_CASE("Slice with negative starts, ends, axes and steps, and clamping") {
  const Shape s{3, 7, 13};
  auto x = random_floats(s.numel(), 5);
  Tensor dx = up(x, s);
  struct Case { ref::Dims st, en, ax, sp; };
  const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  const Case cases[] = {
      {{1, 2}, {3, 11}, {1, 2}, {}},           {{-1}, {small}, {-1}, {-1}},   {{0, 0, 0}, {big, big, big}, {}, {2, 3, 4}},
      {{5}, {1}, {1}, {-2}},                   {{-100}, {100}, {2}, {1}},    {{2, -3}, {0, -14}, {0, 2}, {-1, -3}},
      {{4}, {4}, {1}, {1}},                    {{1}, {-1}, {-2}, {1}},
  };
  for (const auto& c : cases) {
    SliceConfig cfg{s, DType::f32, c.st, c.en, c.ax, c.sp};
    ref::Dims od;
    ref::Dims axes = c.ax;
    if (axes.empty())
      for (size_t i = 0; i < c.st.size(); ++i) axes.push_back(int64_t(i));
    auto want = ref::slice(x, s.dims, c.st, c.en, axes, c.sp, od);
    Shape so = Slice::validate(cfg);
    CAPTURE(so.str());
    REQUIRE(so == Shape(od));
    if (so.numel() == 0) continue;
    check_exact(down<float>(run_op(*Slice::create(ctx(), 0, cfg), {dx}, so)), want);
  }
}

TEST_CASE("Pad in constant, reflect, edge and wrap modes, with axes; both kernels (an element, an output row per work-item)") {
  for (int kernel : {1, 2}) {
  CAPTURE(kernel);
  const Shape s{2, 3, 7, 5};
  auto x = random_floats(s.numel(), 6);
  Tensor dx = up(x, s);
  for (PadMode m : {PadMode::constant, PadMode::reflect, PadMode::edge, PadMode::wrap}) {
    ref::Dims pads{0, 1, 2, 3, 1, 0, 4, 2};
    PadConfig cfg{s, DType::f32, pads, {}, m, 1.5, kernel};
    Shape so = Pad::validate(cfg);
    ref::Dims od;
    auto want = ref::pad(x, s.dims, pads, int(m), 1.5f, od);
    REQUIRE(so == Shape(od));
    check_exact(down<float>(run_op(*Pad::create(ctx(), 0, cfg), {dx}, so)), want);
    // The same padding of the last two axes only, given with negative axes.
    PadConfig ax{s, DType::f32, {2, 3, 4, 2}, {-2, -1}, m, -2.0, kernel};
    ref::Dims od2;
    auto want2 = ref::pad(x, s.dims, {0, 0, 2, 3, 0, 0, 4, 2}, int(m), -2.0f, od2);
    check_exact(down<float>(run_op(*Pad::create(ctx(), 0, ax), {dx}, Shape(od2))), want2);
  }
  // Integer constant padding.
  std::vector<int32_t> xi(6, 9);
  auto got = down<int32_t>(run_op(*Pad::create(ctx(), 0, {Shape{2, 3}, DType::i32, {1, 0, 0, 2}, {}, PadMode::constant, -4, kernel}),
                                  {up(xi, Shape{2, 3})}, Shape{3, 5}, DType::i32));
  std::vector<int32_t> wi{-4, -4, -4, -4, -4, 9, 9, 9, -4, -4, 9, 9, 9, -4, -4};
  CHECK(got == wi);
  // Wrap pads longer than the axis repeat it more than once (i64, batch 1, an axis of length 1).
  const Shape sw{1, 3, 1, 2};
  std::vector<int64_t> xw(size_t(sw.numel()));
  std::iota(xw.begin(), xw.end(), -3);
  ref::Dims pw{0, 7, 2, 5, 1, 4, 3, 0}, odw;
  std::vector<float> xf(xw.begin(), xw.end());
  auto want = ref::pad(xf, sw.dims, pw, 3, 0.0f, odw);
  auto gw = down<int64_t>(
      run_op(*Pad::create(ctx(), 0, {sw, DType::i64, pw, {}, PadMode::wrap, 0.0, kernel}), {up(xw, sw)}, Shape(odw), DType::i64));
  REQUIRE(gw.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) REQUIRE(float(gw[i]) == want[i]);
}
}

TEST_CASE("Expand and Tile") {
  for (auto [in, shape] : std::vector<std::pair<Shape, ref::Dims>>{
           {Shape{3, 1}, {2, 3, 7}}, {Shape{1}, {5, 4}}, {Shape{2, 1, 5}, {1, 3, 1}}, {Shape{}, {3}}}) {
    auto x = random_floats(std::max<int64_t>(1, in.numel()), 7);
    ExpandConfig cfg{in, DType::f32, shape};
    Shape so = Expand::validate(cfg);
    auto got = down<float>(run_op(*Expand::create(ctx(), 0, cfg), {up(x, in)}, so));
    for (int64_t i = 0; i < so.numel(); ++i) REQUIRE(got[i] == x[ref::bcast_index(ref::unravel(i, so.dims), in.dims)]);
  }
  const Shape s{2, 3, 5};
  auto x = random_floats(s.numel(), 8);
  for (ref::Dims reps : {ref::Dims{1, 1, 1}, ref::Dims{2, 1, 3}, ref::Dims{3, 2, 1}}) {
    TileConfig cfg{s, DType::f32, reps};
    ref::Dims od;
    auto want = ref::tile(x, s.dims, reps, od);
    Shape so = Tile::validate(cfg);
    REQUIRE(so == Shape(od));
    check_exact(down<float>(run_op(*Tile::create(ctx(), 0, cfg), {up(x, s)}, so)), want);
  }
}

TEST_CASE("GatherElements along every axis, i32 / i64, negative indices, indices smaller than data") {
  const Shape s{3, 7, 5};
  auto x = random_floats(s.numel(), 19);
  Tensor dx = up(x, s);
  std::mt19937 rng(5);
  for (int64_t ax = -3; ax < 3; ++ax) {
    const int a = int(ax < 0 ? ax + 3 : ax);
    for (Shape is : {Shape{3, 7, 5}, Shape{2, 4, 1}, Shape{1, 1, 1}}) {
      is[a] = a == 0 ? 4 : is[a];  // along the axis the indices may be longer than the data
      std::vector<int64_t> idx(size_t(is.numel()));
      std::uniform_int_distribution<int64_t> u(-s[a], s[a] - 1);
      for (auto& v : idx) v = u(rng);
      auto want = ref::gather_elements(x, s.dims, idx, is.dims, a);
      for (DType it : {DType::i64, DType::i32}) {
        CAPTURE(ax);
        CAPTURE(is.str());
        GatherElementsConfig cfg{s, DType::f32, is, it, ax};
        REQUIRE(GatherElements::validate(cfg) == is);
        Tensor di = it == DType::i64 ? up(idx, is) : up(std::vector<int32_t>(idx.begin(), idx.end()), is);
        check_exact(down<float>(run_op(*GatherElements::create(ctx(), 0, cfg), {dx, di}, is)), want);
      }
    }
  }
  expect_invalid([] { GatherElements::validate({Shape{3, 4}, DType::f32, Shape{3}, DType::i64, 0}); },
                 {"GatherElements", "rank"});
  expect_invalid([] { GatherElements::validate({Shape{3, 4}, DType::f32, Shape{2, 5}, DType::i64, 0}); },
                 {"GatherElements", "exceeds", "dim 1"});
}

TEST_CASE("Gather along every axis with i32 / i64 and negative indices") {
  const Shape s{3, 7, 5};
  auto x = random_floats(s.numel(), 9);
  Tensor dx = up(x, s);
  for (int64_t ax = -3; ax < 3; ++ax) {
    const int a = int(ax < 0 ? ax + 3 : ax);
    const int64_t n = s[a];
    std::vector<int64_t> idx{0, n - 1, -1, -n, 1, 1};
    for (DType it : {DType::i64, DType::i32}) {
      for (Shape is : {Shape{6}, Shape{2, 3}}) {
        GatherConfig cfg{s, DType::f32, is, it, ax};
        Shape so = Gather::validate(cfg);
        ref::Dims od;
        auto want = ref::gather(x, s.dims, idx, is.dims, a, od);
        REQUIRE(so == Shape(od));
        Tensor di = it == DType::i64 ? up(idx, is) : up(std::vector<int32_t>(idx.begin(), idx.end()), is);
        check_exact(down<float>(run_op(*Gather::create(ctx(), 0, cfg), {dx, di}, so)), want);
      }
    }
  }
  // Scalar indices drop the axis.
  CHECK(Gather::validate({s, DType::f32, Shape{}, DType::i64, 1}) == Shape{3, 5});
}

TEST_CASE("Gather with a launch padded past the last index or outer row: every row right, nothing written past the end") {
  // Gathers `idx` along `axis` of data `s` into a view of a larger buffer whose tail holds a sentinel.
  auto check = [](const Shape& s, const std::vector<int64_t>& idx, int64_t axis, uint32_t seed) {
    const Shape is{int64_t(idx.size())};
    auto x = random_floats(s.numel(), seed);
    GatherConfig cfg{s, DType::f32, is, DType::i64, axis};
    const Shape so = Gather::validate(cfg);
    ref::Dims od;
    auto want = ref::gather(x, s.dims, idx, is.dims, int(axis), od);
    const int64_t total = so.numel() + 4096;
    Tensor buf = up(std::vector<float>(size_t(total), -7.0f), Shape{total});
    Tensor out = buf;
    out.shape = so;
    auto op = Gather::create(ctx(), 0, cfg);
    Tensor dx = up(x, s), di = up(idx, is);
    auto ec = ctx().exec();
    op->enqueue(std::vector<Tensor>{dx, di}, std::vector<Tensor>{out}, nullptr, ec);
    ctx().finish();
    std::vector<float> got = down<float>(buf);
    for (int64_t i = so.numel(); i < total; ++i) REQUIRE(got[size_t(i)] == -7.0f);
    got.resize(size_t(so.numel()));
    check_exact(got, want);
  };
  // The local size follows the inner dims (launch.hpp), so the rows are padded up to the group: inner 3
  // (groups of one column), 96 and 384, index counts that are not a multiple of any group.
  for (auto [rows, inner, n] : {std::tuple<int64_t, int64_t, int64_t>{50, 3, 1500}, {40, 96, 77}, {30, 384, 513}}) {
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) idx[size_t(j)] = (j * 7) % rows - (j % 3 == 0 ? rows : 0);
    check(Shape{rows, inner}, idx, 0, 11);
  }
  // Along axis 1 of [outer, len, inner] with few indices: the outer dim fills the group and is padded (a
  // score column of SSDlite's [3234, 91] is one index over 3,234 rows).
  for (auto [outer, len, inner, n] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{3234, 91, 1, 1}, {1000, 7, 1, 3},
                                      {37, 11, 3, 2}}) {
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) idx[size_t(j)] = (j * 5 + 2) % len;
    check(Shape{outer, len, inner}, idx, 1, 12);
  }
}

TEST_CASE("Resize nearest with every coordinate and nearest mode; linear") {
  const Shape s{2, 3, 7, 13};
  auto x = random_floats(s.numel(), 10);
  Tensor dx = up(x, s);
  struct Size { std::vector<float> scales; ref::Dims sizes; };
  const Size sizes[] = {{{1, 1, 2.0f, 0.5f}, {}}, {{}, {2, 3, 10, 20}}, {{1, 1, 1.7f, 2.3f}, {}}, {{}, {2, 3, 1, 4}}};
  for (const auto& sz : sizes)
    for (int mode = 0; mode < 3; ++mode)
      for (int coord = 0; coord < 6; ++coord)
        for (int nearest = 0; nearest < (mode == 0 ? 4 : mode == 2 ? 2 : 1); ++nearest) {
          // For cubic, `nearest` selects exclude_outside and the coefficient (-0.75 PyTorch, -0.5 TF).
          const bool exclude = mode == 2 && nearest == 1;
          const float a = exclude ? -0.5f : -0.75f;
          ResizeConfig cfg{s, sz.scales, sz.sizes, ResizeMode(mode), ResizeCoord(coord),
                           ResizeNearest(mode == 0 ? nearest : 0), a, exclude};
          Shape so = Resize::validate(cfg);
          CAPTURE(so.str());
          CAPTURE(mode);
          CAPTURE(coord);
          CAPTURE(nearest);
          double sh = sz.scales.empty() ? double(so[2]) / 7 : sz.scales[2];
          double sw = sz.scales.empty() ? double(so[3]) / 13 : sz.scales[3];
          auto want = ref::resize2d(x, 6, 7, 13, int(so[2]), int(so[3]), sh, sw, mode, coord, mode == 0 ? nearest : 0, a,
                                    exclude);
          // Nearest and linear: the per-pixel and the table kernels on any device.
          for (ResizeTable t : mode < 2 ? std::vector<ResizeTable>{ResizeTable::off, ResizeTable::on}
                                        : std::vector<ResizeTable>{ResizeTable::automatic}) {
            cfg.table = t;
            CAPTURE(int(t));
            auto got = down<float>(run_op(*Resize::create(ctx(), 0, cfg), {dx}, so));
            CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), mode ? 1e-5 : 0.0, mode ? 1e-5 : 0.0);
          }
        }
}

TEST_CASE("Resize tf_crop_and_resize, antialias, and align_corners with a non-integral output length") {
  const Shape s{2, 3, 7, 13};
  auto x = random_floats(s.numel(), 11);
  Tensor dx = up(x, s);
  struct Case {
    std::vector<float> scales;
    std::vector<int64_t> sizes;
    int coord;
    bool antialias;
    std::array<float, 4> roi;  // h0, w0, h1, w1 (tf_crop_and_resize)
  };
  const Case cases[] = {
      // roi inside, reversed, partly outside (extrapolated), one output row (the roi's centre).
      {{}, {2, 3, 5, 9}, 6, false, {0.2f, 0.1f, 0.9f, 0.75f}},
      {{1, 1, 1.4f, 0.8f}, {}, 6, false, {0.8f, 0.9f, 0.1f, 0.2f}},
      {{}, {2, 3, 6, 11}, 6, false, {-0.3f, 0.25f, 1.2f, 1.35f}},
      {{}, {2, 3, 1, 4}, 6, false, {0.3f, -0.1f, 0.6f, 0.5f}},
      // antialias: both dims down, one down one up, strong downscale; several coordinate modes.
      {{1, 1, 0.6f, 0.45f}, {}, 0, true, {}},
      {{}, {2, 3, 3, 20}, 0, true, {}},
      {{1, 1, 0.3f, 0.2f}, {}, 3, true, {}},
      {{}, {2, 3, 4, 5}, 2, true, {}},
      {{1, 1, 0.55f, 0.7f}, {}, 1, true, {}},
      // align_corners divides by in * scale - 1: 7 * 0.8 = 5.6, 13 * 0.37 = 4.81.
      {{1, 1, 0.8f, 0.37f}, {}, 2, false, {}},
      {{1, 1, 1.7f, 2.3f}, {}, 2, false, {}},
  };
  for (const auto& c : cases)
    for (int mode = 0; mode < 3; ++mode)
      for (int exclude = 0; exclude < 2; ++exclude) {
        if (mode == 0 && (exclude || c.antialias)) continue;  // nearest has no filter
        const float a = exclude ? -0.5f : -0.75f, extrapolation = 7.5f;
        ResizeConfig cfg{
            s, c.scales,    c.sizes, ResizeMode(mode), ResizeCoord(c.coord), ResizeNearest::round_prefer_ceil,
            a, exclude != 0};
        cfg.antialias = c.antialias;
        if (c.coord == 6) cfg.roi = {0, 0, c.roi[0], c.roi[1], 1, 1, c.roi[2], c.roi[3]};
        cfg.extrapolation_value = extrapolation;
        Shape so = Resize::validate(cfg);
        CAPTURE(so.str());
        CAPTURE(mode);
        CAPTURE(c.coord);
        CAPTURE(exclude);
        CAPTURE(c.antialias);
        double sh = c.scales.empty() ? double(so[2]) / 7 : c.scales[2];
        double sw = c.scales.empty() ? double(so[3]) / 13 : c.scales[3];
        ref::ResizeExtra ex{c.antialias, c.roi, extrapolation};
        auto want = ref::resize2d(x, 6, 7, 13, int(so[2]), int(so[3]), sh, sw, mode, c.coord, 1, a, exclude != 0, ex);
        auto got = down<float>(run_op(*Resize::create(ctx(), 0, cfg), {dx}, so));
        CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), mode ? 1e-5 : 0.0, mode ? 1e-5 : 0.0);
      }
  // Extrapolated outputs are exactly the extrapolation value.
  ResizeConfig cfg{s, {}, {2, 3, 5, 9}, ResizeMode::linear, ResizeCoord::tf_crop_and_resize};
  cfg.roi = {0, 0, 1.5f, 1.5f, 1, 1, 2.0f, 2.0f};
  cfg.extrapolation_value = -3.25f;
  for (float v : down<float>(run_op(*Resize::create(ctx(), 0, cfg), {dx}, Resize::validate(cfg)))) REQUIRE(v == -3.25f);
}

TEST_CASE("bad data-movement configurations name the op, the argument and the value") {
  expect_invalid([] { Transpose::validate({Shape{2, 3, 4}, DType::f32, {0, 2, 2}}); }, {"Transpose", "perm[2]", "2"});
  expect_invalid([] { Transpose::validate({Shape{2, 3}, DType::f32, {0}}); }, {"Transpose", "perm", "1 entries"});
  expect_invalid([] { Concat::validate({{Shape{2, 3}, Shape{2, 4}}, DType::f32, 0}); }, {"Concat", "input 1", "[2, 4]"});
  expect_invalid([] { Concat::validate({{Shape{2, 3}}, DType::f32, 2}); }, {"Concat", "axis", "2"});
  expect_invalid([] { Split::validate({Shape{2, 6}, DType::f32, 1, {2, 3}}); }, {"Split", "sum to 5", "6"});
  expect_invalid([] { Slice::validate({Shape{2, 6}, DType::f32, {0}, {1}, {1}, {0}}); }, {"Slice", "steps[0]", "0"});
  expect_invalid([] { Slice::validate({Shape{2, 6}, DType::f32, {0}, {1}, {3}, {}}); }, {"Slice", "axes", "3"});
  expect_invalid([] { Pad::validate({Shape{2, 6}, DType::f32, {0, 6, 0, 0}, {}, PadMode::reflect}); },
                 {"Pad", "reflect", "6"});
  expect_invalid([] { Expand::validate({Shape{3}, DType::f32, {2, 4}}); }, {"Expand", "[2, 4]", "4", "3"});
  expect_invalid([] { Tile::validate({Shape{3}, DType::f32, {2, 4}}); }, {"Tile", "repeats", "2 entries"});
  expect_invalid([] { Gather::validate({Shape{3}, DType::f32, Shape{2}, DType::f32, 0}); }, {"Gather", "indices", "f32"});
  expect_invalid([] { Gather::validate({Shape{3}, DType::f32, Shape{2}, DType::i64, -2}); }, {"Gather", "axis", "-2"});
  expect_invalid([] { Resize::validate({Shape{2, 3, 4}, {2, 1, 1}, {}}); }, {"Resize", "dim 0", "4"});
  expect_invalid(
      [] {
        ResizeConfig c{Shape{2, 3, 4}, {1, 2, 2}, {}, ResizeMode::linear, ResizeCoord::tf_crop_and_resize};
        c.roi = {0, 0, 0, 1, 1};
        Resize::validate(c);
      },
      {"Resize", "roi", "6 entries", "got 5"});
  expect_invalid(
      [] {
        ResizeConfig c{Shape{2, 3, 4}, {1, 2, 2}, {}, ResizeMode::linear, ResizeCoord::tf_crop_and_resize};
        c.roi = {0.5f, 0, 0, 1, 1, 1};
        Resize::validate(c);
      },
      {"Resize", "roi of dim 0", "last two dims"});
}

}  // TEST_SUITE

TEST_SUITE("data") {
  TEST_CASE("ConstantOfShape: small ones fold, a large one is filled on the device, not refused") {
    for (int64_t rows : {3, 1100}) {  // 3 x 1000 folds; 1100 x 1000 (> 2^20 elements) runs on the device
      graph::GraphBuilder b("cos", 17);
      HostTensor shape = HostTensor::from<int64_t>(Shape{2}, std::vector<int64_t>{rows, 1000});
      HostTensor value = HostTensor::from<float>(Shape{1}, std::vector<float>{2.5f});
      auto c = b.op1("ConstantOfShape", {b.constant("shape", shape)}, {{"value", value}});
      auto x = b.input("x", DType::f32, Shape{1000});
      b.output(b.op1("Mul", {c, x}), "y");
      graph::Graph g = b.build();
      graph::prepare(g);
      int device_nodes = 0;
      for (auto& n : g.nodes) device_nodes += n.op_type == "ConstantOfShape";
      CHECK(device_nodes == (rows == 3 ? 0 : 1));
      HostTensor xv = random_tensor(Shape{1000}, 4);
      auto out = test::run_graph(b.build(), {{"x", xv}});
      REQUIRE(out["y"].shape() == Shape{rows, 1000});
      for (int64_t i = 0; i < rows * 1000; i += 997) CHECK(out["y"].as<float>()[i] == 2.5f * xv.as<float>()[i % 1000]);
    }
  }
}
