// A trainable model behind one small interface, and the factory that builds the one `model.name`
// names. Headers stay light: torch::nn::Module is only forward-declared here.
// Depends on core, config and ATen's tensor type.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/config/config.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace hpctrain::model {

// What the data says the model must accept and produce.
struct ModelSpec {
  std::vector<std::int64_t> input_shape;  // per sample, e.g. {1, 28, 28}; {T} for token windows
  std::int64_t num_classes = 0;           // classes, or a language model's vocabulary
  bool token_ids = false;  // a language model's input: int64 token ids [B, T]; output [B, T, vocab]
};

// A parameter the module also holds under a second name (tied weights, e.g. a language model's
// output layer sharing the token embedding).
struct TiedParameter {
  std::string name;     // the second name
  std::string same_as;  // the name it is trained under
  at::Tensor tensor;
};

class Model {
 public:
  virtual ~Model() = default;
  // Logits [B, num_classes] for a batch [B, ...input_shape]; for a language model (gpt or a
  // scripted one: input [B, T] token ids, num_classes the vocabulary), [B, T, vocab].
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  // The underlying module: parameters, buffers, train()/eval().
  virtual torch::nn::Module& module() = 0;
  // Parameters of module() that the model also holds under other names. They are trained once,
  // under their first name; checkpoints store them under every name, so that an exported
  // state_dict loads into the source module as it is.
  virtual std::vector<TiedParameter> tied_parameters() const { return {}; }
};

// Builds `config.name` for `spec`. Throws ConfigError for options the model cannot use with this
// data (e.g. fashion_cnn on inputs that are not 1x28x28).
std::shared_ptr<Model> make_model(const config::ModelConfig& config, const ModelSpec& spec);

}  // namespace hpctrain::model
