// `cldl train MODEL.onnx --input NAME=X.npy --labels Y.npy --loss cross_entropy|mse --out TRAINED.onnx`: trains
// every float initializer of the model (models/train.hpp) on the samples of X along --batch-axis, with a progress
// bar on stderr (a terminal) and the loss per epoch; writes the model with the trained weights.
#include <unistd.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "models/train.hpp"
#include "tools/cldl/commands.hpp"
#include "tools/cldl/model_cli.hpp"

namespace cldl::cli {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train the float initializers of an ONNX model (SGD or Adam)");
  static std::string model, input, labels, loss = "cross_entropy", output, optimizer = "sgd", out, device;
  static int64_t epochs = 1, batch = 32, batch_axis = 0;
  static float lr = 0.01f, momentum = 0.9f, weight_decay = 0.0f, min_lr = 0.0f, clip_norm = 0.0f;
  static std::string schedule = "constant", parallel = "data";
  static int64_t warmup = 0, time_chunks = 0;
  static uint64_t seed = 0;
  static bool nesterov = false, no_shuffle = false, json = false;
  cmd->add_option("model", model, "ONNX model file")->required();
  cmd->add_option("-i,--input", input, "[NAME=]FILE: the samples (.npy or .pb) for the model input NAME")->required();
  cmd->add_option("-l,--labels", labels, "Targets (.npy or .pb): int64 class ids (cross_entropy) or float (mse)")
      ->required();
  cmd->add_option("--loss", loss, "cross_entropy (over the output's last axis) or mse")
      ->check(CLI::IsMember({"cross_entropy", "mse"}));
  cmd->add_option("--output", output, "The model output the loss reads (default: the first)");
  cmd->add_option("--epochs", epochs, "Passes over the data")->check(CLI::PositiveNumber);
  cmd->add_option("--batch", batch, "Samples per step")->check(CLI::PositiveNumber);
  cmd->add_option("--batch-axis", batch_axis, "The samples' axis of the input, labels and output (1: time-major)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--optimizer", optimizer,
                  "sgd (with --momentum, --nesterov), adam, or adamw (--weight-decay decoupled, as torch.optim.AdamW)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  static CLI::Option* lr_opt =
      cmd->add_option("--lr", lr, "Learning rate (default: 0.01 with sgd, 0.001 with adam / adamw)")
          ->check(CLI::PositiveNumber);
  cmd->add_option("--momentum", momentum, "SGD momentum (0: plain SGD)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--nesterov", nesterov, "SGD with Nesterov momentum");
  cmd->add_option("--weight-decay", weight_decay,
                  "L2 coefficient added to the gradients (adamw: the decoupled weight decay)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--schedule", schedule,
                  "Learning rate per step: constant, or cosine (from --lr down to --min-lr over all the epochs' steps)")
      ->check(CLI::IsMember({"constant", "cosine"}));
  cmd->add_option("--warmup", warmup, "Steps of linear warm-up: step s (from 0) takes (s + 1) / N of its rate")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--min-lr", min_lr, "The rate the cosine schedule ends at (default 0)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--clip-norm", clip_norm,
                  "Scale each step's gradients so their global L2 norm is at most this (as torch's clip_grad_norm_)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", seed, "Seed of the per-epoch shuffling");
  cmd->add_flag("--no-shuffle", no_shuffle, "Batches in the data's order every epoch");
  cmd->add_option("-o,--out", out, "Where to write the trained model (.onnx)")->required();
  cmd->add_option("-d,--device", device,
                  "Device spec (cpu, gpu, P:D, name); several (cpu:0,cpu:1) train data parallel, each taking a shard "
                  "of every batch, or layer parallel (--parallel layers)")
      ->envname("CLDL_DEVICE");
  cmd->add_option("--parallel", parallel,
                  "With several devices: data (each takes a shard of every batch) or layers (the LSTM / GRU layers in "
                  "groups over the devices, in time chunks: a wavefront forward and in reverse backward)")
      ->check(CLI::IsMember({"data", "layers"}));
  cmd->add_option("--time-chunks", time_chunks,
                  "--parallel layers: chunks of time steps per recurrent layer (default 8 over several devices)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", json, "One JSON object on stdout (per-epoch and per-step losses, times)");
  cmd->callback([] {
    graph::TrainOptionNames names;
    std::string x_file = input;
    if (auto eq = input.find('='); eq != std::string::npos) {
      names.input = input.substr(0, eq);
      x_file = input.substr(eq + 1);
    }
    names.output = output;
    names.loss = loss;
    names.optimizer = optimizer;
    if (lr_opt->count() > 0) names.lr = lr;
    names.momentum = momentum;
    names.nesterov = nesterov;
    names.weight_decay = weight_decay;
    names.batch = batch;
    names.batch_axis = batch_axis;
    names.seed = seed;
    names.shuffle = !no_shuffle;
    names.schedule = schedule;
    names.warmup = warmup;
    names.min_lr = min_lr;
    names.clip_norm = clip_norm;
    names.parallel = parallel;
    names.time_chunks = time_chunks;
    graph::TrainOptions o = graph::parse_train_options(names);
    HostTensor x = graph::read_tensor_file(x_file);
    HostTensor y = graph::read_tensor_file(labels);
    if (size_t(o.batch_axis) < x.shape().rank())  // the cosine's length: every step of every epoch
      o.total_steps = epochs * ((x.shape()[size_t(o.batch_axis)] + o.batch - 1) / o.batch);
    if (o.loss == graph::TrainLoss::cross_entropy && y.dtype() == DType::i32)
      y = graph::cast_host(y, DType::i64);
    auto ctx = Context::create(device);
    for (size_t d = 0; d < ctx->device_count() && ctx->device_count() > 1; ++d) o.devices.push_back(int(d));
    auto t0 = std::chrono::steady_clock::now();
    graph::Trainer trainer(ctx, graph::import_onnx_file(model), o);
    const double setup_ms = elapsed_ms(t0);
    const bool bar = !json && isatty(2);
    nlohmann::json epochs_json = nlohmann::json::array();
    for (int64_t e = 0; e < epochs; ++e) {
      auto progress = [&](int64_t done, int64_t total, float l) {  // l: NaN while the losses are on the device
        if (!bar) return;
        const int width = 30, filled = int(width * done / total);
        fmt::print(stderr, "\repoch {}/{} [{}{}] {}/{} steps{}\x1b[K", e + 1, epochs,
                   std::string(size_t(filled), '#'), std::string(size_t(width - filled), '.'), done, total,
                   std::isnan(l) ? std::string() : fmt::format(" loss {:.4f}", l));
      };
      const auto r = trainer.epoch(x, y, progress);
      if (bar) fmt::print(stderr, "\r\x1b[K");
      if (json)
        epochs_json.push_back({{"epoch", e + 1},
                               {"loss", r.mean_loss},
                               {"seconds", r.seconds},
                               {"lr", graph::lr_at(o, trainer.steps_done() - 1)},
                               {"step_losses", r.step_losses}});
      else
        fmt::print("epoch {}: loss {:.6f} ({} steps, {:.2f} s, last lr {:.3g})\n", e + 1, r.mean_loss,
                   r.step_losses.size(), r.seconds, graph::lr_at(o, trainer.steps_done() - 1));
    }
    trainer.save_onnx(model, out);
    std::string dev = ctx->device().info.name;
    for (size_t d = 1; d < ctx->device_count(); ++d) dev += " + " + ctx->device(int(d)).info.name;
    if (json) {
      fmt::print("{}\n", nlohmann::json{{"model", model},
                                        {"out", out},
                                        {"device", dev},
                                        {"weights", trainer.weights().size()},
                                        {"steps", trainer.steps_done()},
                                        {"setup_ms", setup_ms},
                                        {"epochs", epochs_json}}
                             .dump());
      return;
    }
    fmt::print("{} weights trained for {} steps on {} (setup {:.0f} ms); wrote {}\n", trainer.weights().size(),
               trainer.steps_done(), dev, setup_ms, out);
  });
}

}  // namespace cldl::cli
