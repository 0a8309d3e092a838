// Distributed evaluation: each rank scores a disjoint contiguous part of a Source's items (no
// padding, so every item counts once) and one allreduce of (loss sum, correct, count) gives the
// global result (a denoiser's: its diffusion loss alone, objective.h). A token stream's items are windows laid end to end, each of their tokens predicted
// once (the stream's first token and a tail shorter than a window are not).
// Evaluation (below) is what a training run does with it: a record per evaluation and the best one.
// Depends on comm, data (Source), model and the metrics writer.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "hpctrain/config/config.h"
#include "hpctrain/data/source.h"
#include "hpctrain/observe/metrics_writer.h"
#include "hpctrain/train/objective.h"

namespace hpctrain::comm {
class Communicator;
}
namespace hpctrain::model {
class Model;
}

namespace hpctrain::train {

struct EvalResult {
  double loss = 0.0;      // mean cross-entropy, per sample or (token stream) per token; a denoiser's mean loss
  double accuracy = 0.0;  // fraction of correct top-1 predictions (of the next token)
  bool has_accuracy = true;  // false for a denoiser
  std::int64_t samples = 0;  // samples, or windows of a token stream
  std::int64_t tokens = 0;   // tokens predicted; 0 for a sample split
  bool language_model() const { return tokens > 0; }
  double perplexity() const;  // exp(loss), for a language model
};

// Collective. The model lives on `device`; batches are finished there. Leaves it in eval mode.
EvalResult evaluate(model::Model& model, const Objective& objective, const data::Source& source,
                    comm::Communicator& comm, std::int64_t batch_size, c10::Device device);

// The best evaluation of a run so far: a classifier's accuracy, a language model's or a denoiser's
// loss.
struct BestEvaluation {
  std::optional<double> test_acc;
  std::optional<double> test_loss;
};

// The evaluations of a training run on data.eval_split: logged, recorded in metrics.jsonl, and
// compared with the best so far (ckpt.keep_best).
class Evaluation {
 public:
  // `source` null: no eval split, nothing to do.
  Evaluation(std::shared_ptr<const data::Source> source, const config::Config& config, comm::Communicator& comm,
             c10::Device device, observe::MetricsWriter& metrics);

  bool enabled() const { return source_ != nullptr; }
  // Collective: evaluates `model` after step `step` of epoch `epoch` (from 0).
  EvalResult run(model::Model& model, std::int64_t epoch, std::int64_t step);
  // The last run beat the best before it.
  bool improved() const { return improved_; }
  const BestEvaluation& best() const { return best_; }
  void restore(const BestEvaluation& best) { best_ = best; }

 private:
  std::shared_ptr<const data::Source> source_;
  config::Config config_;
  std::unique_ptr<Objective> objective_;
  comm::Communicator& comm_;
  c10::Device device_;
  observe::MetricsWriter& metrics_;
  BestEvaluation best_;
  bool improved_ = false;
};

}  // namespace hpctrain::train
