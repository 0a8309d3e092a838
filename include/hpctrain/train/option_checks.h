// Every check of options against one another, defined in one place (one option's own range is
// the option table's, config/option_table.cpp). prepare_training runs check_options before MPI
// starts and before a run directory exists, so every rank refuses alike and nothing is written;
// Step checks train.cuda_graphs again for whoever builds one directly (bench, tests). What the
// world size decides of the data (a global batch, a rank's share of the split) waits for MPI:
// check_world_fits (trainer.h), still before the run directory. Depends on config.
#pragma once

#include <string>

#include "hpctrain/config/config.h"

namespace hpctrain::train {

// Where the options are to run.
struct Placement {
  bool use_cuda = false;  // dist.device resolved
  int world_size = 1;     // ranks, as launched
  bool training = true;   // false: an evaluation (float32, no optimizer step)
};

// Throws ConfigError naming the options that cannot work together at `where`, and what to change.
void check_options(const config::Config& config, const Placement& where);

// "" when train.cuda_graphs can run with `config` at `where`, else why not (the end of a
// ConfigError).
std::string cuda_graphs_refusal(const config::Config& config, const Placement& where);

// With train.cuda_graphs, throws ConfigError when cuda_graphs_refusal says why not.
void check_cuda_graphs(const config::Config& config, const Placement& where);

}  // namespace hpctrain::train
