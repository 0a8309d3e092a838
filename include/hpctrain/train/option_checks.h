// Every check of options against one another, defined in one place (one option's own range is
// the option table's, config/option_table.cpp). Nothing is written before they pass, and every
// rank refuses alike:
// - check_options: before MPI starts and before anything is loaded (prepare_training);
// - check_model_options: on the built model, still before MPI (what the sharding can share);
// - check_mpi_threads: once MPI has started, before the run directory exists (`hpctrain train`).
// Step checks train.cuda_graphs again for whoever builds one directly (bench, tests). What the
// MPI world decides of the data (a rank's share of the split) is check_world_fits' (trainer.h).
// Depends on config.
#pragma once

#include <string>

#include "hpctrain/config/config.h"

namespace hpctrain::model {
class Model;
}  // namespace hpctrain::model

namespace hpctrain::train {

// Where the options are to run.
struct Placement {
  bool use_cuda = false;  // dist.device resolved
  int world_size = 1;     // ranks, as launched
  bool training = true;   // false: an evaluation (float32, no optimizer step)
};

// Throws ConfigError naming the options that cannot work together at `where`, and what to change.
void check_options(const config::Config& config, const Placement& where);

// Throws ConfigError when dist.zero_stage cannot share `model`'s trainable parameters.
void check_model_options(const config::Config& config, model::Model& model);

// Throws ConfigError when ckpt.async needs MPI_THREAD_MULTIPLE (with a sharded checkpoint) and
// MPI started without it.
void check_mpi_threads(const config::Config& config, bool thread_multiple);

// "" when train.cuda_graphs can run with `config` at `where`, else why not (the end of a
// ConfigError).
std::string cuda_graphs_refusal(const config::Config& config, const Placement& where);

// With train.cuda_graphs, throws ConfigError when cuda_graphs_refusal says why not.
void check_cuda_graphs(const config::Config& config, const Placement& where);

}  // namespace hpctrain::train
