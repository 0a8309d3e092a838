// What a run reports as it goes: per log interval one progress line on rank 0 and one
// metrics.jsonl record (the job's mean loss, learning rate, gradient norm, throughput, the step
// time split into data, comm and the rest, ETA, memory, MFU); once per process the model's
// arithmetic (FLOPs per sample, what MFU is measured against) and how long start-up took.
// Depends on comm, config, ddp's sum over ranks, this module's metrics and timing parts, and ATen.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>

#include "hpctrain/config/config.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/observe/held_bytes.h"
#include "hpctrain/observe/metrics_writer.h"
#include "hpctrain/observe/mfu.h"
#include "hpctrain/observe/step_timing.h"

namespace hpctrain::comm {
class Communicator;
}  // namespace hpctrain::comm

namespace hpctrain::observe {

// What a step gives the report: its outcome and the figures of the model and the rank after it.
struct StepFigures {
  at::Tensor loss_sum;    // this rank's weighted loss sum, float64 on the device
  double samples = 0.0;   // this rank's real samples
  bool finite = true;     // applied: its loss counts in the interval's mean
  double comm_s = 0.0;    // waiting for the gradient reduction after backward
  std::int64_t step = 0;  // optimizer steps of the run, this one included
  std::optional<double> training_flops;  // per sample (model/flops.h), once counted
  HeldBytes held;                        // by this rank, after the step
};

// Where the run is when a record is written.
struct ProgressPoint {
  std::int64_t epoch = 0;            // from 0
  std::int64_t step_in_epoch = 0;    // optimizer steps of this epoch's rest taken so far
  std::int64_t steps_in_epoch = 0;   // in this epoch's rest (from where it was resumed)
  std::int64_t steps_per_epoch = 0;  // of a whole epoch, for the ETA
  std::int64_t step = 0;             // optimizer steps of the run
  double lr = 0.0;
  std::optional<double> grad_norm;   // of the last step
  std::int64_t skipped = 0;          // train.nonfinite's count
  std::optional<double> loss_scale;
};

class ProgressReport {
 public:
  ProgressReport(const config::Config& config, comm::Communicator& comm, c10::Device device, MetricsWriter& metrics,
                 bool language_model);

  // An interval starts with each epoch (and after each record).
  void begin_interval();
  // After each step; `wait_s`: its wait for the loader. The first step of this process also logs
  // the model's arithmetic and writes the start-up record.
  void add(const StepFigures& step, double wait_s);
  // Collective (one small allreduce): the interval's line and record.
  void write(const ProgressPoint& at);

 private:
  // An interval's figures, as the line and the record give them.
  struct Figures {
    double mean_loss = 0.0;  // NaN when every step was skipped
    double samples_per_s = 0.0;
    double tokens_per_s = 0.0;  // a language model's
    double eta_s = 0.0;
    double tflops = 0.0;        // the model's, over the job
    std::optional<double> mfu;  // when the peak is known
    StepBreakdown per_step;
  };
  Figures interval_figures(const ProgressPoint& at);  // collective
  void log_line(const ProgressPoint& at, const Figures& figures) const;
  nlohmann::json record(const ProgressPoint& at, const Figures& figures) const;
  void note_model_arithmetic(std::optional<double> training_flops);
  void note_first_step(std::int64_t step);

  config::Config config_;
  comm::Communicator& comm_;
  c10::Device device_;
  MetricsWriter& metrics_;
  bool language_model_;
  bool first_step_noted_ = false;
  std::optional<double> training_flops_;  // per sample (model/flops.h), once counted
  HeldBytes held_;                        // by this rank, after the last step
  std::optional<PeakFlops> peak_flops_;   // one device's, for MFU (train.peak_tflops)
  // Over this rank's real samples since the last record. The loss stays on the device, so a step
  // never waits for the GPU to report it.
  at::Tensor loss_sum_;
  double loss_samples_ = 0.0;  // of the steps applied (a skipped step's loss may be NaN)
  double real_samples_ = 0.0;  // of every step, for the rate
  Timer interval_;
  IntervalTimes times_;
};

}  // namespace hpctrain::observe
