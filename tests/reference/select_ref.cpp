// Selection and scan references: loops over every element, in double.
#include "select_ref.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace cldl::ref {

namespace {
// outer x len x inner around one axis.
void split(const Dims& d, int axis, int64_t& outer, int64_t& len, int64_t& inner) {
  outer = len = inner = 1;
  for (int i = 0; i < int(d.size()); ++i) (i < axis ? outer : i == axis ? len : inner) *= d[size_t(i)];
}
// a before b in TopK's order for `largest` (NaN the largest value).
bool better(double a, double b, bool largest) {
  if (std::isnan(a) || std::isnan(b))
    return largest ? (std::isnan(a) && !std::isnan(b)) : (!std::isnan(a) && std::isnan(b));
  return largest ? a > b : a < b;
}
}  // namespace

void topk(const std::vector<double>& x, const Dims& d, int64_t k, int axis, bool largest, std::vector<double>& values,
          std::vector<int64_t>& indices) {
  int64_t outer, len, inner;
  split(d, axis, outer, len, inner);
  values.assign(size_t(outer * k * inner), 0.0);
  indices.assign(values.size(), 0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<bool> taken(size_t(len), false);
      for (int64_t r = 0; r < k; ++r) {  // selection: the best untaken element, the lowest index on ties
        int64_t best = -1;
        for (int64_t j = 0; j < len; ++j) {
          if (taken[size_t(j)]) continue;
          if (best < 0 ||
              better(x[size_t((o * len + j) * inner + i)], x[size_t((o * len + best) * inner + i)], largest))
            best = j;
        }
        taken[size_t(best)] = true;
        values[size_t((o * k + r) * inner + i)] = x[size_t((o * len + best) * inner + i)];
        indices[size_t((o * k + r) * inner + i)] = best;
      }
    }
}

std::vector<double> reverse_sequence(const std::vector<double>& x, const Dims& d, const std::vector<int64_t>& lens,
                                     int time_axis, int batch_axis) {
  std::vector<double> y(x.size());
  for (int64_t e = 0; e < int64_t(x.size()); ++e) {
    Dims at = unravel(e, d);
    const int64_t b = at[size_t(batch_axis)], t = at[size_t(time_axis)];
    Dims src = at;
    if (t < lens[size_t(b)]) src[size_t(time_axis)] = lens[size_t(b)] - 1 - t;
    int64_t s = 0;
    for (size_t i = 0; i < d.size(); ++i) s = s * d[i] + src[i];
    y[size_t(e)] = x[size_t(s)];
  }
  return y;
}

std::vector<double> cumprod(const std::vector<double>& x, const Dims& d, int axis, bool exclusive, bool reverse) {
  int64_t outer, len, inner;
  split(d, axis, outer, len, inner);
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double p = 1.0;
      for (int64_t t = 0; t < len; ++t) {
        const int64_t j = reverse ? len - 1 - t : t;
        const size_t at = size_t((o * len + j) * inner + i);
        if (exclusive) y[at] = p;
        p *= x[at];
        if (!exclusive) y[at] = p;
      }
    }
  return y;
}

std::vector<double> compress(const std::vector<double>& x, const Dims& d, const std::vector<bool>& cond, int axis,
                             Dims& od) {
  const Dims dd = axis < 0 ? Dims{int64_t(x.size())} : d;
  const int a = axis < 0 ? 0 : axis;
  int64_t outer, len, inner;
  split(dd, a, outer, len, inner);
  std::vector<int64_t> picks;
  for (int64_t j = 0; j < len && j < int64_t(cond.size()); ++j)
    if (cond[size_t(j)]) picks.push_back(j);
  od = dd;
  od[size_t(a)] = int64_t(picks.size());
  std::vector<double> y;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p : picks)
      for (int64_t i = 0; i < inner; ++i) y.push_back(x[size_t((o * len + p) * inner + i)]);
  return y;
}

void unique(const std::vector<double>& x, bool sorted, std::vector<double>& y, std::vector<int64_t>& first,
            std::vector<int64_t>& inverse, std::vector<int64_t>& counts) {
  y.clear(), first.clear(), inverse.clear(), counts.clear();
  std::map<double, int64_t> seen;  // value -> position in first-occurrence order
  for (size_t j = 0; j < x.size(); ++j)
    if (seen.emplace(x[j], int64_t(first.size())).second) first.push_back(int64_t(j));
  std::vector<int64_t> order(first.size());  // output position -> first-occurrence position
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  if (sorted)
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return x[size_t(first[size_t(a)])] < x[size_t(first[size_t(b)])]; });
  std::vector<int64_t> pos(order.size());
  for (size_t r = 0; r < order.size(); ++r) pos[size_t(order[r])] = int64_t(r);
  std::vector<int64_t> f(order.size());
  counts.assign(order.size(), 0);
  for (size_t r = 0; r < order.size(); ++r) {
    f[r] = first[size_t(order[r])];
    y.push_back(x[size_t(f[r])]);
  }
  for (double v : x) {
    const int64_t r = pos[size_t(seen.at(v))];
    inverse.push_back(r);
    ++counts[size_t(r)];
  }
  first = f;
}

}  // namespace cldl::ref
