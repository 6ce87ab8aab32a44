// Plain C++ references for the training ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, Adagrad,
// Momentum, Adam) and the axis normalizations (LpNormalization, MeanVarianceNormalization), in double, written
// from the ONNX spec and its reference implementation (onnx/reference/ops), independent of the kernels.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cnn_ref.hpp"

namespace cldl::ref {

// x [N, C, d1, ..., dk] (log-probabilities), target [N, d1, ..., dk], weight [C] or empty; reduction "none" (one
// value per target), "sum" or "mean" (one value: the weighted sum over the weight sum of the non-ignored
// targets; NaN when all are ignored).
std::vector<double> nll_loss(const std::vector<double>& x, const Dims& xd, const std::vector<int64_t>& target,
                             const std::vector<double>& weight, std::optional<int64_t> ignore_index,
                             const std::string& reduction);

// log-softmax over axis 1 of x [N, C, d1, ..., dk].
std::vector<double> log_softmax_axis1(const std::vector<double>& x, const Dims& xd);

// One optimizer step on one tensor (the states in place): r the learning rate, t the step count.
void adagrad_step(double r, int64_t t, std::vector<double>& x, const std::vector<double>& g, std::vector<double>& h,
                  double norm_coefficient, double epsilon, double decay_factor);
void momentum_step(double r, int64_t t, std::vector<double>& x, const std::vector<double>& g, std::vector<double>& v,
                   double norm_coefficient, double alpha, double beta, bool nesterov);
void adam_step(double r, int64_t t, std::vector<double>& x, const std::vector<double>& g, std::vector<double>& v,
               std::vector<double>& h, double norm_coefficient, double norm_coefficient_post, double alpha, double beta,
               double epsilon);

// LpNormalization along `axis` (p = 1 or 2; a zero norm gives 0); MeanVarianceNormalization over `axes`.
std::vector<double> lp_normalize(const std::vector<double>& x, const Dims& xd, int64_t axis, int p);
std::vector<double> mean_variance_normalize(const std::vector<double>& x, const Dims& xd, std::vector<int64_t> axes);

}  // namespace cldl::ref
