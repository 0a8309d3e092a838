// The one way every `hpctrain bench` mode times its cases, as nccl-tests' driver does for each
// operation: untimed warm-up rounds, then timed rounds in which every case runs once, in
// alternating order (a b c, c b a, a b c, ...), so that a machine that speeds up or slows down,
// and whatever one case leaves behind for the next, touch every case alike; a case and its
// reference are compared by their ratio. Each case's seconds are summed up as min, median and
// max, of the slowest rank. Private to src/cli.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

namespace hpctrain::comm {
class Bootstrap;
}  // namespace hpctrain::comm

namespace hpctrain::cli {

struct BenchCase {
  std::string name;
  std::function<void()> run;               // what is timed
  std::function<void()> before = nullptr;  // untimed, before each run (a dropped page cache, a barrier)
};

struct Spread {
  double min = 0.0;
  double median = 0.0;
  double max = 0.0;
};

struct Rounds {
  int warmup = 3;  // untimed rounds
  int timed = 20;
  c10::Device device = c10::kCPU;  // a GPU is synchronized after each run, inside its time
};

// Seconds of each case (in `cases`' order) in each timed round, this rank's.
std::vector<std::vector<double>> time_in_turn(const std::vector<BenchCase>& cases, const Rounds& rounds);

Spread spread_of(std::vector<double> seconds);

// Collective: the slowest rank's min, median and max of its `seconds`.
Spread slowest_spread(const comm::Bootstrap& bootstrap, const std::vector<double>& seconds);

// Round by round, a - b: a case's time less its reference's, timed in the same round.
std::vector<double> differences(const std::vector<double>& a, const std::vector<double>& b);

// Collective: the slowest rank's `mine` (a max through a sum of one-hot contributions).
double slowest_rank(const comm::Bootstrap& bootstrap, double mine);

}  // namespace hpctrain::cli
