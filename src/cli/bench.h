// The `hpctrain bench` measurements, one file each, and what they share. Like nccl-tests: untimed
// warm-up first, timed repetitions reported as medians, every column with its unit, and a
// correctness check in the same run. Private to src/cli.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/model/model.h"

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

// `bench step --zero-stage S` (bench_sharded_step.cpp): whole optimizer steps with `dist.zero_stage`
// S and the memory they hold.
int bench_sharded_step(const config::ParsedArgs& parsed, const BenchModel& bench);

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
