#include "hpctrain/observe/progress_report.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/ddp/grad_sync.h"

namespace hpctrain::observe {
namespace {

// "8.48 M", "1.21 G": a FLOP count for the log.
std::string flop_text(double flops) {
  const char* const prefixes[] = {"", "k", "M", "G", "T", "P"};
  size_t i = 0;
  while (flops >= 1000 && i + 1 < std::size(prefixes)) {
    flops /= 1000;
    ++i;
  }
  return fmt::format("{:.3g} {}", flops, prefixes[i]);
}

}  // namespace

ProgressReport::ProgressReport(const config::Config& config, comm::Communicator& comm, c10::Device device,
                               MetricsWriter& metrics, bool language_model)
    : config_(config), comm_(comm), device_(device), metrics_(metrics), language_model_(language_model) {}

void ProgressReport::begin_interval() {
  loss_sum_ = torch::zeros({}, torch::dtype(torch::kFloat64).device(device_));
  loss_samples_ = 0.0;
  real_samples_ = 0.0;
  interval_.reset();
  times_.reset();
}

void ProgressReport::add(const StepFigures& step, double wait_s) {
  times_.data_s += wait_s;
  times_.comm_s += step.comm_s;
  ++times_.steps;
  if (step.finite) {
    loss_sum_ += step.loss_sum;  // a skipped step's loss may be NaN: the interval's mean leaves it out
    loss_samples_ += step.samples;
  }
  real_samples_ += step.samples;
  held_ = step.held;
  if (first_step_noted_) return;
  note_model_arithmetic(step.training_flops);
  note_first_step(step.step);
}

void ProgressReport::note_model_arithmetic(std::optional<double> training_flops) {
  training_flops_ = training_flops;
  if (!training_flops_) {
    log::warn("no matrix product or convolution was seen in the model's forward pass; the metrics leave out "
              "model_tflops and mfu");
    return;
  }
  const std::string gpu = device_.is_cuda() ? comm::gpu_name(device_.index()) : "";
  peak_flops_ = resolve_peak_flops(config_.train.peak_tflops, gpu, config_.train.precision, config_.train.tf32);
  const std::string unit = language_model_ ? "window" : "sample";
  log::info("model arithmetic: {}FLOP per {} forward, {}FLOP per {} trained (3x forward); MFU {}",
            flop_text(*training_flops_ / 3), unit, flop_text(*training_flops_), unit,
            peak_flops_ ? fmt::format("against {:g} TFLOP/s per device ({})", peak_flops_->tflops, peak_flops_->source)
                        : std::string("not measured: set train.peak_tflops to one device's peak"));
}

// Once per process: how long start-up took (libraries, data, a checkpoint to resume from), the
// figure that grows with a loaded file system and with the number of ranks. Rank 0's, in the log
// and as a metrics record {"step", "first_step_s", "unix_time"}.
void ProgressReport::note_first_step(std::int64_t step) {
  first_step_noted_ = true;
  const double age_s = sys::process_age_s();
  log::info("first optimizer step done {:.2f} s after this process started", age_s);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  metrics_.write({{"step", step},
                  {"first_step_s", age_s},
                  {"unix_time", std::chrono::duration<double>(now).count()}});
}

void ProgressReport::write(const ProgressPoint& at) {
  const Figures figures = interval_figures(at);
  log_line(at, figures);
  metrics_.write(record(at, figures));
  begin_interval();
}

// Collective: one small allreduce per log interval, the loss and throughput of the whole job.
ProgressReport::Figures ProgressReport::interval_figures(const ProgressPoint& at) {
  const std::vector<double> totals =
      ddp::sum_over_ranks(comm_, {loss_sum_.item<double>(), loss_samples_, real_samples_}, device_);
  Figures f;
  // NaN when every step of the interval was skipped: the log says "nan", the metrics leave it out.
  f.mean_loss = totals[1] > 0 ? totals[0] / totals[1] : std::nan("");
  const double wall_s = interval_.elapsed_s();
  f.samples_per_s = totals[2] / wall_s;
  // Rank 0's clock; the ETA assumes the rest of the run goes at this interval's pace. Steps left:
  // this epoch's, then whole epochs at this world size, up to train.max_steps.
  f.per_step = breakdown(times_, wall_s);
  std::int64_t steps_left =
      at.steps_in_epoch - at.step_in_epoch + (config_.train.epochs - at.epoch - 1) * at.steps_per_epoch;
  if (config_.train.max_steps > 0) steps_left = std::min(steps_left, config_.train.max_steps - at.step);
  f.eta_s = static_cast<double>(std::max<std::int64_t>(0, steps_left)) * f.per_step.step_ms / 1e3;
  // A language model's samples are windows of gpt_block_size tokens, each token a prediction.
  f.tokens_per_s = language_model_ ? f.samples_per_s * static_cast<double>(config_.model.gpt_block_size) : 0;
  f.tflops = training_flops_ ? model_tflops(f.samples_per_s, *training_flops_) : 0.0;
  if (training_flops_ && peak_flops_) f.mfu = mfu(f.tflops, comm_.size(), peak_flops_->tflops);
  return f;
}

void ProgressReport::log_line(const ProgressPoint& at, const Figures& f) const {
  std::string rate = language_model_ ? fmt::format("{:.0f} tokens/s", f.tokens_per_s)
                                     : fmt::format("{:.0f} samples/s", f.samples_per_s);
  if (f.mfu) rate += fmt::format(" (MFU {:.1f} %)", 100 * *f.mfu);
  // No norm after a skipped step: its gradients were not finite.
  const std::string norm = at.grad_norm ? fmt::format("{:.3g}", *at.grad_norm) : std::string("-");
  log::info("epoch {} step {} ({}/{}) loss {:.4f} lr {:.3g} grad_norm {} {}, {:.1f} ms/step "
            "(data {:.1f}, comm {:.1f}), ETA {}",
            at.epoch + 1, at.step, at.step_in_epoch, at.steps_in_epoch, f.mean_loss, at.lr, norm, rate,
            f.per_step.step_ms, f.per_step.data_ms, f.per_step.comm_ms, format_duration(f.eta_s));
}

nlohmann::json ProgressReport::record(const ProgressPoint& at, const Figures& f) const {
  nlohmann::json record = {{"step", at.step},
                           {"epoch", at.epoch + 1},
                           {"lr", at.lr},
                           {"samples_per_s", f.samples_per_s},
                           {"step_ms", f.per_step.step_ms},
                           {"data_ms", f.per_step.data_ms},
                           {"comm_ms", f.per_step.comm_ms},
                           {"compute_ms", f.per_step.compute_ms},
                           {"eta_s", f.eta_s},
                           {"peak_rss_mb", static_cast<double>(sys::peak_rss_bytes()) / (1 << 20)}};
  if (std::isfinite(f.mean_loss)) record["loss"] = f.mean_loss;
  if (at.grad_norm) record["grad_norm"] = *at.grad_norm;
  if (language_model_) record["tokens_per_s"] = f.tokens_per_s;
  if (training_flops_) record["model_tflops"] = f.tflops;
  if (f.mfu) record["mfu"] = *f.mfu;
  if (device_.is_cuda()) {
    const std::int64_t in_use = comm::gpu_memory_in_use_bytes(device_.index());
    if (in_use >= 0) record["gpu_mem_mb"] = static_cast<double>(in_use) / (1 << 20);
  }
  if (at.loss_scale) record["loss_scale"] = *at.loss_scale;
  record["skipped_steps"] = at.skipped;
  constexpr double kMiB = 1 << 20;
  record["param_mb"] = static_cast<double>(held_.parameters) / kMiB;
  record["grad_mb"] = static_cast<double>(held_.gradients) / kMiB;
  record["optim_mb"] = static_cast<double>(held_.optimizer_state) / kMiB;
  return record;
}

}  // namespace hpctrain::observe
