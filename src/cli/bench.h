// The `hpctrain bench` measurements, one file each, and what they share. Like nccl-tests: one
// driver times every case (bench_driver.h: warm-up, cases in turn, min/median/max), every column
// has its unit, and a correctness check runs in the same run. bench_command.cpp's table lists the
// modes, the flags each reads and the function that runs it. Private to src/cli.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "bench_driver.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/data/split.h"
#include "hpctrain/model/model.h"
#include "hpctrain/observe/mfu.h"

namespace hpctrain::cli {

// `name`'s value, or `fallback` when the flag is absent.
std::string text_flag(const config::ParsedArgs& parsed, const std::string& name, const std::string& fallback);

// The model bench step times (--model and, for gpt, its size flags) and what one sample of its
// input is.
struct BenchModel {
  config::ModelConfig config;
  model::ModelSpec spec;
  std::int64_t default_batch = 64;
};
BenchModel bench_model(const config::ParsedArgs& parsed);

// bench step's flags for the step itself, checked.
struct StepOptions {
  std::int64_t batch = 0;
  int steps = 0;
  std::int64_t bucket_mb = 0;
  bool use_cuda = false;
  config::Precision precision = config::Precision::kFp32;
  std::string precision_name;
  bool tf32 = true;
  bool check_collectives = true;  // --check-collectives: dist.check_collectives
};
StepOptions step_options(const config::ParsedArgs& parsed, const BenchModel& bench);

// A mode of `bench step` is run with the model and the step's options read from its flags.
using StepMode = int (*)(const config::ParsedArgs& parsed, const BenchModel& bench, const StepOptions& options);

// `bench step --zero-stage S` (bench_sharded_step.cpp): whole optimizer steps with `dist.zero_stage`
// S and the memory they hold.
int bench_sharded_step(const config::ParsedArgs& parsed, const BenchModel& bench, const StepOptions& options);

// `bench step --update` (bench_update_step.cpp): whole optimizer steps with AdamW per tensor, as
// multi-tensor kernels, and with --cuda-graphs from a CUDA graph, timed in turn.
int bench_update_step(const config::ParsedArgs& parsed, const BenchModel& bench, const StepOptions& options);

// `bench step`: a step taken apart (bench_step.cpp).
int bench_step_parts(const config::ParsedArgs& parsed, const BenchModel& bench, const StepOptions& options);

// Runs `mode` with the model and options `parsed` gives.
int bench_step(const config::ParsedArgs& parsed, StepMode mode);

// The Config a train::Step needs for the benchmarked model: the defaults, `options` ("section.key"
// -> value; checked as a config file's are) and `bench`'s model.
config::Config step_config(const BenchModel& bench, const std::map<std::string, std::string>& options);

// One micro-batch of random data for this rank, finished as a Source finishes it.
data::Batch random_batch(const model::ModelSpec& spec, std::int64_t batch, int ranks, c10::Device device);

// The rows of a bench step table: ms, samples/s, tokens/s, model TFLOP/s per device and MFU.
class StepTable {
 public:
  // `flops_per_sample`: trained (3x forward); `peak`: the device's for the precision, if known.
  StepTable(const model::ModelSpec& spec, std::int64_t batch, int ranks, double flops_per_sample,
            std::optional<observe::PeakFlops> peak);
  void print_header() const;
  // The median's ms, and with `rate` (a case that trains) its rates; min and max ms last.
  void row(const char* name, const Spread& seconds, bool rate) const;

 private:
  const model::ModelSpec& spec_;
  std::int64_t batch_;
  int ranks_;
  double flops_per_sample_;
  std::optional<observe::PeakFlops> peak_;
};

int bench_data(const config::ParsedArgs& parsed);
int bench_data_io(const config::ParsedArgs& parsed);
int bench_comm(const config::ParsedArgs& parsed);
const char* bench_data_usage();
const char* bench_comm_usage();
const char* bench_step_usage();

}  // namespace hpctrain::cli
