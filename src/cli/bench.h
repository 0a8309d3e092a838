// The `hpctrain bench` measurements, one file each, and what they share. Like nccl-tests: untimed
// warm-up first, timed repetitions reported as medians, every column with its unit, and a
// correctness check in the same run. Private to src/cli.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/timer.h"
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

// `bench step --zero-stage S` (bench_sharded_step.cpp): whole optimizer steps with `dist.zero_stage`
// S and the memory they hold.
int bench_sharded_step(const config::ParsedArgs& parsed, const BenchModel& bench, const StepOptions& options);

// `bench step --update` (bench_update_step.cpp): whole optimizer steps with AdamW per tensor, as
// multi-tensor kernels, and with --cuda-graphs from a CUDA graph, timed in turn.
int bench_update_step(const config::ParsedArgs& parsed, const BenchModel& bench, const StepOptions& options);

// The Config a train::Step needs for the benchmarked model: the defaults, `options` ("section.key"
// -> value; checked as a config file's are) and `bench`'s model.
config::Config step_config(const BenchModel& bench, const std::map<std::string, std::string>& options);

// One micro-batch of random data for this rank, finished as a Source finishes it.
data::Batch random_batch(const model::ModelSpec& spec, std::int64_t batch, int ranks, c10::Device device);

// Seconds of each of `works` in each of `steps` timed steps (this rank's), after 3 untimed runs
// of each, timed in turn (bench_step.cpp).
std::vector<std::vector<double>> time_in_turn(c10::Device device, int steps,
                                              const std::vector<std::function<void()>>& works);

// The rows of a bench step table: ms, samples/s, tokens/s, model TFLOP/s per device and MFU.
class StepTable {
 public:
  // `flops_per_sample`: trained (3x forward); `peak`: the device's for the precision, if known.
  StepTable(const model::ModelSpec& spec, std::int64_t batch, int ranks, double flops_per_sample,
            std::optional<observe::PeakFlops> peak);
  void print_header() const;
  // `rate`: also the rates (a case that trains); else ms alone.
  void row(const char* name, double seconds, bool rate) const;

 private:
  const model::ModelSpec& spec_;
  std::int64_t batch_;
  int ranks_;
  double flops_per_sample_;
  std::optional<observe::PeakFlops> peak_;
};

int bench_data(const config::ParsedArgs& parsed);
int bench_comm(const config::ParsedArgs& parsed);
int bench_step(const config::ParsedArgs& parsed);
const char* bench_data_usage();
const char* bench_comm_usage();
const char* bench_step_usage();

// The slowest rank's value of `mine` (collective): max through a sum of one-hot contributions.
inline double slowest_rank(const comm::Bootstrap& bootstrap, double mine) {
  std::vector<float> all(static_cast<size_t>(bootstrap.world_size()), 0.0f);
  all[static_cast<size_t>(bootstrap.world_rank())] = static_cast<float>(mine);
  bootstrap.allreduce_sum(all.data(), static_cast<std::int64_t>(all.size()));
  return *std::max_element(all.begin(), all.end());
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The slowest rank's median of `seconds` (collective).
inline double slowest_median(const comm::Bootstrap& bootstrap, const std::vector<double>& seconds) {
  return slowest_rank(bootstrap, median(seconds));
}

// Seconds of one pass of `work`, `repeats` times after one untimed pass.
inline std::vector<double> time_passes(int repeats, const std::function<void()>& work) {
  work();
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const Timer timer;
    work();
    seconds.push_back(timer.elapsed_s());
  }
  return seconds;
}

}  // namespace hpctrain::cli
