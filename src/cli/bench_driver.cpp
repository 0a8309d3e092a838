#include "bench_driver.h"

#include <torch/cuda.h>

#include <algorithm>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/timer.h"

namespace hpctrain::cli {

std::vector<std::vector<double>> time_in_turn(const std::vector<BenchCase>& cases, const Rounds& rounds) {
  HT_CHECK(!cases.empty() && rounds.timed >= 1 && rounds.warmup >= 0, "a bench times at least one case once");
  const auto timed_run = [&](const BenchCase& c) {
    if (c.before) c.before();
    const Timer timer;
    c.run();
    if (rounds.device.is_cuda()) torch::cuda::synchronize(rounds.device.index());
    return timer.elapsed_s();
  };
  for (int round = 0; round < rounds.warmup; ++round) {
    for (const BenchCase& c : cases) timed_run(c);
  }
  std::vector<std::vector<double>> seconds(cases.size());
  for (int round = 0; round < rounds.timed; ++round) {
    for (size_t k = 0; k < cases.size(); ++k) {
      const size_t c = round % 2 == 0 ? k : cases.size() - 1 - k;
      seconds[c].push_back(timed_run(cases[c]));
    }
  }
  return seconds;
}

Spread spread_of(std::vector<double> seconds) {
  HT_CHECK(!seconds.empty(), "a spread of no times");
  std::sort(seconds.begin(), seconds.end());
  return {seconds.front(), seconds[seconds.size() / 2], seconds.back()};
}

double slowest_rank(const comm::Bootstrap& bootstrap, double mine) {
  std::vector<float> all(static_cast<size_t>(bootstrap.world_size()), 0.0f);
  all[static_cast<size_t>(bootstrap.world_rank())] = static_cast<float>(mine);
  bootstrap.allreduce_sum(all.data(), static_cast<std::int64_t>(all.size()));
  return *std::max_element(all.begin(), all.end());
}

Spread slowest_spread(const comm::Bootstrap& bootstrap, const std::vector<double>& seconds) {
  const Spread mine = spread_of(seconds);
  return {slowest_rank(bootstrap, mine.min), slowest_rank(bootstrap, mine.median), slowest_rank(bootstrap, mine.max)};
}

std::vector<double> differences(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) out.push_back(a[i] - b[i]);
  return out;
}

}  // namespace hpctrain::cli
