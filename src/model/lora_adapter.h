// One LoRA adapter beside a Linear layer (hpctrain/model/lora.h). Private to src/model.
#pragma once

#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <memory>
#include <string>

#include "hpctrain/model/lora.h"

namespace hpctrain::model {

// The suffix of a layer's weight in a parameter name.
inline const std::string kWeightSuffix = ".weight";

inline bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Throws ConfigError when a layer of `in` inputs and `out` outputs cannot have adapters of `rank`.
void check_lora_rank(const std::string& where, std::int64_t in, std::int64_t out, std::int64_t rank);

class LoraAdapter {
 public:
  // Registers lora_dropout, lora_A [rank, in] and lora_B [out, rank] on `layer`, the module whose
  // output the adapter adds to (PEFT's names). Throws ConfigError for a rank above min(in, out).
  LoraAdapter(torch::nn::Module& layer, const std::string& where, std::int64_t in, std::int64_t out,
              const LoraOptions& options);

  // scale * B(A(dropout(x))).
  at::Tensor operator()(const at::Tensor& x);

 private:
  torch::nn::Dropout dropout_{nullptr};
  torch::nn::Linear a_{nullptr};
  torch::nn::Linear b_{nullptr};
  double scale_;
};

// x W^T + b in the weight's dtype (a bf16 base's too), the result in x's dtype.
at::Tensor base_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// base_linear(x, weight) without a bias, with the weight's rows padded with zeros to a multiple of
// `multiple` for the product and the padding's columns left out of the result (a view): the same
// values, from a product whose dimensions are aligned (Note [Padded vocabulary] in gpt.cpp).
at::Tensor padded_rows_linear(const at::Tensor& x, const at::Tensor& weight, std::int64_t multiple);

// `layer(x)`, plus its adapter's update when it has one.
at::Tensor adapted(torch::nn::Linear& layer, const std::unique_ptr<LoraAdapter>& adapter, const at::Tensor& x);

}  // namespace hpctrain::model
