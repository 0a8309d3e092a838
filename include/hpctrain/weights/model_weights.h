// A model's tensors under the names checkpoints and weight files give them: what a checkpoint
// stores, every weight, the buffers alone, the parameters that learn and what a moving average
// covers. Depends on ckpt and model.
#pragma once

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/model/model.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace hpctrain::weights {

// The model's parameters and buffers by name: what a checkpoint stores. Of a model with LoRA
// adapters, the frozen base is left out (weights/lora_base.h).
ckpt::NamedTensors model_state(model::Model& model);
// Every parameter and buffer by name, a LoRA model's base too.
ckpt::NamedTensors all_weights(model::Model& model);
// The buffers alone (BatchNorm's statistics): what rank 0 stores of a model whose parameters are
// sharded (dist.zero_stage=3), the ranks adding their slices of the parameters.
ckpt::NamedTensors model_buffers(model::Model& model);

// Only parameters that learn get gradients averaged, clipped and stepped: a frozen one (a
// TorchScript module's requires_grad=False, a LoRA base) stays as it is, as in PyTorch.
ckpt::NamedTensors trainable_parameters(torch::nn::Module& module);

// The weights a moving average of a whole model covers, under the names a checkpoint stores them:
// the trainable parameters, and the second name of a tied one (a TorchScript model's), the same
// tensor.
ckpt::NamedTensors averaged_parameters(model::Model& model);

}  // namespace hpctrain::weights
