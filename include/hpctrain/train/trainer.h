// The training loop of one rank (docs/architecture.md, "One training step"):
//   batch -> forward -> loss -> backward -> GradSync -> optimizer step -> metrics
// with BatchNorm buffers kept equal to rank 0's, evaluation at the end of every epoch and a final
// checkpoint. Depends on every module below it.
#pragma once

#include <memory>
#include <optional>

#include "hpctrain/config/config.h"
#include "hpctrain/data/split.h"
#include "hpctrain/data/token_stream.h"
#include "hpctrain/train/evaluator.h"
#include "hpctrain/train/run_directory.h"

namespace hpctrain::comm {
class Bootstrap;
}
namespace hpctrain::model {
class Model;
}

namespace hpctrain::train {

// Everything a run needs that can be checked before MPI starts, so a bad config or dataset stops
// every rank the same way before anything is written.
// A dataset of samples (image or array plus label) fills the splits; a token stream (`hpctrain
// prepare text`), trained by the gpt model, fills the token streams instead.
struct TrainingSetup {
  config::Config config;
  std::optional<data::Split> train_split;  // absent for evaluation only
  std::optional<data::Split> eval_split;
  std::optional<data::TokenStream> train_tokens;
  std::optional<data::TokenStream> eval_tokens;
  std::shared_ptr<model::Model> model;
  int threads = 1;        // intra-op threads of this rank
  bool use_cuda = false;  // dist.device resolved; the GPU index follows once MPI knows the node

  bool language_model() const { return train_tokens.has_value() || eval_tokens.has_value(); }
};

// Sets the thread count and seed, reads the data and builds the model. Throws ConfigError/DataError.
TrainingSetup prepare_training(const config::Config& config, bool need_train_split);

// What depends on the world size, checked once MPI knows it and before the run directory is
// created: train.global_batch divides among the ranks, and train.drop_last leaves a step to run.
// Throws ConfigError, alike on every rank.
void check_world_fits(const TrainingSetup& setup, int world_size);

// The model's parameters and buffers by name: what a checkpoint stores.
std::vector<std::pair<std::string, at::Tensor>> model_state(model::Model& model);

// Intra-op threads: train.threads, or the cores this process is bound to when 0.
int configure_threads(const config::TrainConfig& train);

struct TrainSummary {
  std::int64_t steps = 0;
  std::optional<EvalResult> last_eval;
  std::string checkpoint;  // path of the last checkpoint written, "" if none
  bool stopped = false;    // stopped on a signal (ckpt.signals) after writing `checkpoint`
  // Non-empty when non-finite steps stopped the run (train.nonfinite, train.max_skipped) after
  // writing `checkpoint`: the same one-line reason on every rank (exit code 6).
  std::string failure;
};

class Trainer {
 public:
  Trainer(TrainingSetup setup, comm::Bootstrap& bootstrap, RunDirectory run_dir);
  ~Trainer();

  // Collective: resumes from a checkpoint (ckpt.resume), trains for train.epochs (or up to
  // train.max_steps) or until a stop signal, and returns what happened.
  TrainSummary run();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hpctrain::train
