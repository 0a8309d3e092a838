// Trainer: what a run reports as it goes: the first forward's FLOP count, progress records and
// lines, evaluations, and the message and checkpoint of a non-finite step that ends the run.
#include <torch/torch.h>

#include <cmath>
#include <iterator>

#include "hpctrain/model/flops.h"
#include "hpctrain/train/optimizer.h"
#include "trainer_state.h"

namespace hpctrain::train {
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

at::Tensor Trainer::State::forward(const at::Tensor& input) {
  if (flops_counted) return net().forward(input);
  flops_counted = true;
  at::Tensor logits;
  const double flops = model::count_flops([&] { logits = net().forward(input); });
  if (flops <= 0) {
    log::warn("no matrix product or convolution was seen in the model's forward pass; the metrics leave out "
              "model_tflops and mfu");
    return logits;
  }
  training_flops = model::training_flops_per_sample(flops / static_cast<double>(input.size(0)));
  const std::string gpu = device.is_cuda() ? comm::gpu_name(device.index()) : "";
  peak_flops = resolve_peak_flops(config().train.peak_tflops, gpu, config().train.precision, config().train.tf32);
  const std::string unit = setup.language_model() ? "window" : "sample";
  log::info("model arithmetic: {}FLOP per {} forward, {}FLOP per {} trained (3x forward); MFU {}",
            flop_text(*training_flops / 3), unit, flop_text(*training_flops), unit,
            peak_flops ? fmt::format("against {:g} TFLOP/s per device ({})", peak_flops->tflops, peak_flops->source)
                       : std::string("not measured: set train.peak_tflops to one device's peak"));
  return logits;
}

void Trainer::State::log_progress(std::int64_t epoch, std::int64_t step_in_epoch,
                                  std::int64_t steps_per_epoch, at::Tensor& loss_sum, double& loss_samples,
                                  double& real_samples, Timer& interval, IntervalTimes& times) {
  // One small allreduce per log interval: the loss and throughput of the whole job.
  const std::vector<double> totals =
      ddp::sum_over_ranks(*comm, {loss_sum.item<double>(), loss_samples, real_samples}, device);
  // NaN when every step of the interval was skipped: the log says "nan", the metrics leave it out.
  const double mean_loss = totals[1] > 0 ? totals[0] / totals[1] : std::nan("");
  const double wall_s = interval.elapsed_s();
  const double samples_per_s = totals[2] / wall_s;
  const double lr = current_lr(*optimizer);
  // Rank 0's clock; the ETA assumes the rest of the run goes at this interval's pace. Steps left:
  // this epoch's, then whole epochs at this world size, up to train.max_steps.
  const StepBreakdown per_step = breakdown(times, wall_s);
  std::int64_t steps_left =
      steps_per_epoch - step_in_epoch + (config().train.epochs - epoch - 1) * steps_per_full_epoch;
  if (config().train.max_steps > 0) steps_left = std::min(steps_left, config().train.max_steps - step);
  const double eta_s = static_cast<double>(std::max<std::int64_t>(0, steps_left)) * per_step.step_ms / 1e3;
  // A language model's samples are windows of gpt_block_size tokens, each token a prediction.
  const double tokens_per_s = setup.language_model() ? samples_per_s * static_cast<double>(config().model.gpt_block_size) : 0;
  std::string rate = setup.language_model() ? fmt::format("{:.0f} tokens/s", tokens_per_s)
                                            : fmt::format("{:.0f} samples/s", samples_per_s);
  const double tflops = training_flops ? model_tflops(samples_per_s, *training_flops) : 0.0;
  const bool with_mfu = training_flops && peak_flops;
  const double utilization = with_mfu ? mfu(tflops, comm->size(), peak_flops->tflops) : 0.0;
  if (with_mfu) rate += fmt::format(" (MFU {:.1f} %)", 100 * utilization);
  // No norm after a skipped step: its gradients were not finite.
  const std::string norm = grad_norm ? fmt::format("{:.3g}", *grad_norm) : std::string("-");
  log::info("epoch {} step {} ({}/{}) loss {:.4f} lr {:.3g} grad_norm {} {}, {:.1f} ms/step "
            "(data {:.1f}, comm {:.1f}), ETA {}",
            epoch + 1, step, step_in_epoch, steps_per_epoch, mean_loss, lr, norm, rate,
            per_step.step_ms, per_step.data_ms, per_step.comm_ms, format_duration(eta_s));
  nlohmann::json record = {{"step", step},
                           {"epoch", epoch + 1},
                           {"lr", lr},
                           {"samples_per_s", samples_per_s},
                           {"step_ms", per_step.step_ms},
                           {"data_ms", per_step.data_ms},
                           {"comm_ms", per_step.comm_ms},
                           {"compute_ms", per_step.compute_ms},
                           {"eta_s", eta_s},
                           {"peak_rss_mb", static_cast<double>(sys::peak_rss_bytes()) / (1 << 20)}};
  if (std::isfinite(mean_loss)) record["loss"] = mean_loss;
  if (grad_norm) record["grad_norm"] = *grad_norm;
  if (setup.language_model()) record["tokens_per_s"] = tokens_per_s;
  if (training_flops) record["model_tflops"] = tflops;
  if (with_mfu) record["mfu"] = utilization;
  if (device.is_cuda()) {
    const std::int64_t in_use = comm::gpu_memory_in_use_bytes(device.index());
    if (in_use >= 0) record["gpu_mem_mb"] = static_cast<double>(in_use) / (1 << 20);
  }
  if (loss_scaler) record["loss_scale"] = loss_scaler->scale();
  record["skipped_steps"] = skipped.total();
  metrics.write(record);
  loss_sum.zero_();
  loss_samples = 0.0;
  real_samples = 0.0;
  interval.reset();
  times.reset();
}

std::string Trainer::State::describe_nonfinite(const at::Tensor& rank_loss) {
  std::vector<double> loss_not_finite(static_cast<size_t>(comm->size()), 0.0);
  loss_not_finite[static_cast<size_t>(comm->rank())] = std::isfinite(rank_loss.item<double>()) ? 0.0 : 1.0;
  loss_not_finite = ddp::sum_over_ranks(*comm, loss_not_finite, device);
  std::string ranks;
  for (size_t r = 0; r < loss_not_finite.size(); ++r) {
    if (loss_not_finite[r] > 0) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  }
  const std::int64_t first = first_nonfinite(gradients());
  const std::string tensor = first >= 0 ? "'" + gradient_names[static_cast<size_t>(first)] + "'" : "a parameter";
  return "the averaged gradient of " + tensor + " holds inf or NaN (" +
         (ranks.empty() ? std::string("every rank's loss was finite: the backward pass overflowed")
                        : "the loss was not finite on rank(s) " + ranks) +
         ")";
}

void Trainer::State::stop_on_nonfinite(const at::Tensor& rank_loss) {
  const std::string what = describe_nonfinite(rank_loss);
  // The step was not applied, and step, epoch_now and cursor_now still say where it began.
  const bool on_disk = written_step == step && written_epoch == epoch_now && written_cursor == cursor_now;
  const std::string path = on_disk ? last_checkpoint : save_checkpoint();
  finish_checkpoint_writes();
  const config::TrainConfig& train = config().train;
  const std::string rule =
      train.nonfinite == "abort"
          ? std::string("train.nonfinite=abort stops at the first such step")
          : fmt::format("{} step(s) in a row would be skipped, more than train.max_skipped={} (the weights "
                        "are those after step {})",
                        skipped.in_a_row() + 1, train.max_skipped, step - skipped.in_a_row());
  failure = fmt::format("step {}: {}; {}; checkpoint {} holds the last good state (epoch {}, sampler cursor {}): "
                        "lower optim.lr, set optim.clip_grad_norm, or check the step's samples (hpctrain data "
                        "order ... --epoch {} --from-cursor {})",
                        step + 1, what, rule, path, epoch_now + 1, cursor_now, epoch_now + 1, cursor_now);
}

std::optional<EvalResult> Trainer::State::evaluate_epoch(std::int64_t epoch) {
  if (!setup.eval_split && !setup.eval_tokens) return std::nullopt;
  const activity::Scope evaluating(activity::Kind::kEvaluation);
  sync_buffers();
  const std::int64_t batch = config().train.eval_batch_size;
  const EvalResult result = setup.eval_tokens ? evaluate(net(), *setup.eval_tokens, *comm, batch, device)
                                              : evaluate(net(), *setup.eval_split, *comm, batch, device);
  nlohmann::json record = {{"epoch", epoch + 1}, {"step", step}, {"test_loss", result.loss},
                           {"test_acc", result.accuracy}};
  if (result.language_model()) {
    log::info("epoch {} step {} eval on {} ({} tokens): test_loss {:.4f} test_ppl {:.2f} test_acc {:.4f} (next token)",
              epoch + 1, step, config().data.eval_split, result.tokens, result.loss, result.perplexity(),
              result.accuracy);
    record["test_ppl"] = result.perplexity();
  } else {
    log::info("epoch {} step {} eval on {} ({} samples): test_loss {:.4f} test_acc {:.4f}", epoch + 1, step,
              config().data.eval_split, result.samples, result.loss, result.accuracy);
  }
  metrics.write(record);
  if (result.language_model()) {
    improved = !best_test_loss || std::isnan(*best_test_loss) || result.loss < *best_test_loss;
    if (improved) best_test_loss = result.loss;
  } else {
    improved = !best_test_acc || result.accuracy > *best_test_acc;
    if (improved) best_test_acc = result.accuracy;
  }
  return result;
}

}  // namespace hpctrain::train
