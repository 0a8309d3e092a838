// A trainable model behind one small interface, and the factory that builds the one `model.name`
// names. Headers stay light: torch::nn::Module is only forward-declared here.
// Depends on core, config and ATen's tensor type.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "hpctrain/config/config.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace hpctrain::model {

struct LoraOptions;

// What the data says the model must accept and produce.
struct ModelSpec {
  std::vector<std::int64_t> input_shape;  // per sample, e.g. {1, 28, 28}; {T} for token windows
  std::int64_t num_classes = 0;           // classes, or a language model's vocabulary
  bool token_ids = false;  // a language model's input: int64 token ids [B, T]; output [B, T, vocab]
  // Every parameter made without memory (parameter_memory.h), for dist.zero_stage=3 with every
  // weight read from a file: each rank copies only its shard of them from the file
  // (DeferredWeights), and no rank ever holds the whole model. Only llama reads it so far.
  bool parameters_without_memory = false;
};

// The values, in a file's memory map, of parameters made without memory: whoever shards them
// copies its part from here, then clears it.
struct DeferredWeights {
  std::map<const void*, at::Tensor> sources;  // by the parameter's TensorImpl
  std::shared_ptr<const void> keep_alive;     // the mapping they view
  bool mapped = false;  // the sources view a read-only file mapping, whose pages may be dropped once read
};

// A parameter the module also holds under a second name (tied weights, e.g. a language model's
// output layer sharing the token embedding).
struct TiedParameter {
  std::string name;     // the second name
  std::string same_as;  // the name it is trained under
  at::Tensor tensor;
};

// What a built-in model's forward tells whoever shards its parameters by block (dist.zero_stage=3,
// src/sharding/block_gatherer.h): a block's parameters need to be whole only from just before its
// forward to just after it, and again for its backward; the parameters outside every block, for
// the whole forward and backward.
class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  virtual void begin_forward() = 0;
  virtual void before_block(std::size_t block) = 0;
  // `output`: what the block's forward returned; its gradient arrives just before the block's
  // backward runs.
  virtual void after_block(std::size_t block, const at::Tensor& output) = 0;
  virtual void end_forward() = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // Logits [B, num_classes] for a batch [B, ...input_shape]; for a language model (gpt or a
  // scripted one: input [B, T] token ids, num_classes the vocabulary), [B, T, vocab].
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  // A denoiser's forward (model.name=unet, train.objective=diffusion): the noise it sees in
  // `noisy` images [B, ...input_shape] at diffusion steps `steps` (int64 [B]), of classes
  // `labels` (int64 [B]; -1: no class, as classifier-free guidance has it). Others throw.
  virtual at::Tensor predict_noise(const at::Tensor& noisy, const at::Tensor& steps, const at::Tensor& labels);
  // The underlying module: parameters, buffers, train()/eval().
  virtual torch::nn::Module& module() = 0;
  // Parameters of module() that the model also holds under other names. They are trained once,
  // under their first name; checkpoints store them under every name, so that an exported
  // state_dict loads into the source module as it is.
  virtual std::vector<TiedParameter> tied_parameters() const { return {}; }
  // The submodules whose parameters dist.zero_stage=3 gathers one at a time, in the order forward
  // runs them; the parameters outside them are gathered for a whole forward and backward. Empty
  // (a TorchScript module's): the model cannot be sharded by block.
  virtual std::vector<std::shared_ptr<torch::nn::Module>> blocks() { return {}; }
  // Adds LoRA adapters (model/lora.h) to the layers `targets` names; false: the model takes none.
  // Throws ConfigError for a rank a layer cannot have.
  virtual bool add_adapters(const LoraOptions& /*options*/, const std::set<std::string>& /*targets*/) {
    return false;
  }
  // Null: no hooks (the parameters are whole).
  void set_block_hooks(BlockHooks* hooks) { hooks_ = hooks; }
  DeferredWeights& deferred_weights() { return deferred_; }

 protected:
  // A forward that has blocks runs begin_forward(), each block through run_block(), and returns
  // through end_forward().
  void begin_forward();
  at::Tensor run_block(std::size_t block, const std::function<at::Tensor()>& forward);
  at::Tensor end_forward(at::Tensor output);

 private:
  BlockHooks* hooks_ = nullptr;
  DeferredWeights deferred_;
};

// Builds `config.name` for `spec`. Throws ConfigError for options the model cannot use with this
// data (e.g. fashion_cnn on inputs that are not 1x28x28).
std::shared_ptr<Model> make_model(const config::ModelConfig& config, const ModelSpec& spec);

}  // namespace hpctrain::model
