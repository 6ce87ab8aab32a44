// References for the training ops and the axis normalizations (see training_ref.hpp).
#include "training_ref.hpp"

#include <cmath>
#include <limits>

namespace cldl::ref {

std::vector<double> nll_loss(const std::vector<double>& x, const Dims& xd, const std::vector<int64_t>& target,
                             const std::vector<double>& weight, std::optional<int64_t> ignore_index,
                             const std::string& reduction) {
  const int64_t n = xd[0], c = xd[1];
  int64_t inner = 1;
  for (size_t i = 2; i < xd.size(); ++i) inner *= xd[i];
  std::vector<double> loss(size_t(n * inner));
  double sum = 0, wsum = 0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t d = 0; d < inner; ++d) {
      const size_t p = size_t(b * inner + d);
      const int64_t t = target[p];
      if (ignore_index && t == *ignore_index) continue;  // loss 0, weight 0
      const double w = weight.empty() ? 1.0 : weight[size_t(t)];
      loss[p] = -x[size_t((b * c + t) * inner + d)] * w;
      sum += loss[p];
      wsum += w;
    }
  if (reduction == "none") return loss;
  if (reduction == "sum") return {sum};
  return {wsum == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / wsum};
}

std::vector<double> log_softmax_axis1(const std::vector<double>& x, const Dims& xd) {
  const int64_t n = xd[0], c = xd[1];
  int64_t inner = 1;
  for (size_t i = 2; i < xd.size(); ++i) inner *= xd[i];
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t d = 0; d < inner; ++d) {
      auto at = [&](int64_t k) { return size_t((b * c + k) * inner + d); };
      double m = -INFINITY, s = 0;
      for (int64_t k = 0; k < c; ++k) m = std::max(m, x[at(k)]);
      for (int64_t k = 0; k < c; ++k) s += std::exp(x[at(k)] - m);
      for (int64_t k = 0; k < c; ++k) y[at(k)] = x[at(k)] - m - std::log(s);
    }
  return y;
}

void adagrad_step(double r, int64_t t, std::vector<double>& x, const std::vector<double>& g, std::vector<double>& h,
                  double norm_coefficient, double epsilon, double decay_factor) {
  const double lr = r / (1 + double(t) * decay_factor);
  for (size_t i = 0; i < x.size(); ++i) {
    const double gr = norm_coefficient * x[i] + g[i];
    h[i] += gr * gr;
    x[i] -= lr * gr / (std::sqrt(h[i]) + epsilon);
  }
}

void momentum_step(double r, int64_t t, std::vector<double>& x, const std::vector<double>& g, std::vector<double>& v,
                   double norm_coefficient, double alpha, double beta, bool nesterov) {
  const double b = t > 0 ? beta : 1.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double gr = norm_coefficient * x[i] + g[i];
    v[i] = alpha * v[i] + b * gr;
    x[i] -= r * (nesterov ? gr + alpha * v[i] : v[i]);
  }
}

void adam_step(double r, int64_t t, std::vector<double>& x, const std::vector<double>& g, std::vector<double>& v,
               std::vector<double>& h, double norm_coefficient, double norm_coefficient_post, double alpha, double beta,
               double epsilon) {
  const double lr = t > 0 ? r * std::sqrt(1 - std::pow(beta, double(t))) / (1 - std::pow(alpha, double(t))) : r;
  for (size_t i = 0; i < x.size(); ++i) {
    const double gr = norm_coefficient * x[i] + g[i];
    v[i] = alpha * v[i] + (1 - alpha) * gr;
    h[i] = beta * h[i] + (1 - beta) * gr * gr;
    x[i] = (1 - norm_coefficient_post) * (x[i] - lr * v[i] / (std::sqrt(h[i]) + epsilon));
  }
}

namespace {
// Calls f(group of flat indices) for every combination of the kept axes.
template <typename F>
void for_each_group(const Dims& xd, const std::vector<bool>& red, F&& f) {
  const int64_t total = numel(xd);
  std::vector<std::vector<size_t>> groups;
  for (int64_t i = 0; i < total; ++i) {
    Dims idx = unravel(i, xd);
    int64_t key = 0;
    for (size_t a = 0; a < xd.size(); ++a)
      if (!red[a]) key = key * xd[a] + idx[a];
    if (size_t(key) >= groups.size()) groups.resize(size_t(key) + 1);
    groups[size_t(key)].push_back(size_t(i));
  }
  for (auto& gidx : groups)
    if (!gidx.empty()) f(gidx);
}
}  // namespace

std::vector<double> lp_normalize(const std::vector<double>& x, const Dims& xd, int64_t axis, int p) {
  if (axis < 0) axis += int64_t(xd.size());
  std::vector<bool> red(xd.size());
  red[size_t(axis)] = true;
  std::vector<double> y(x.size());
  for_each_group(xd, red, [&](const std::vector<size_t>& gi) {
    double s = 0;
    for (size_t i : gi) s += p == 1 ? std::fabs(x[i]) : x[i] * x[i];
    const double norm = p == 1 ? s : std::sqrt(s);
    for (size_t i : gi) y[i] = norm == 0 ? 0 : x[i] / norm;
  });
  return y;
}

std::vector<double> mean_variance_normalize(const std::vector<double>& x, const Dims& xd, std::vector<int64_t> axes) {
  std::vector<bool> red(xd.size());
  for (auto a : axes) red[size_t(a < 0 ? a + int64_t(xd.size()) : a)] = true;
  std::vector<double> y(x.size());
  for_each_group(xd, red, [&](const std::vector<size_t>& gi) {
    double m = 0, m2 = 0;
    for (size_t i : gi) m += x[i], m2 += x[i] * x[i];
    m /= double(gi.size());
    m2 /= double(gi.size());
    const double sd = std::sqrt(std::max(m2 - m * m, 0.0));  // the ONNX function's E[x^2] - E[x]^2
    for (size_t i : gi) y[i] = (x[i] - m) / (sd + 1e-9);
  });
  return y;
}

}  // namespace cldl::ref
