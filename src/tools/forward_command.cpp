// `hpctrain forward`: a Hugging Face model directory's forward on token ids from a safetensors
// file, the logits written as safetensors: how a port is checked against another implementation
// numerically. One process, the CPU, float32.
#include <torch/torch.h>

#include <iostream>

#include "hpctrain/config/decoder_config.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/io/safetensors.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/launch/commands.h"
#include "hpctrain/model/language_model.h"
#include "hpctrain/model/model.h"
#include "hpctrain/weights/init_from.h"

namespace hpctrain::cli {
namespace {

const char* kForwardUsage =
    "usage: hpctrain forward --model DIR --inputs FILE --out FILE\n\n"
    "Runs a Hugging Face model directory's forward (model.name=llama: config.json and its safetensors) on\n"
    "the token ids of a safetensors file and writes the logits as safetensors:\n"
    "  --model DIR     the model directory\n"
    "  --inputs FILE   a safetensors file with token_ids, int64 [B, T], and optionally attention_mask,\n"
    "                  int64 [B, T] of 1 (a real token) and 0 (padding, which no token attends to)\n"
    "  --out FILE      written with logits, float32 [B, T, vocab_size]\n"
    "One process on the CPU, in float32, as transformers' model(input_ids, attention_mask).logits\n"
    "computes them: positions count 0 .. T-1 in every row (rotary attention depends only on how far\n"
    "apart two tokens are, so a row padded on the left gives its tokens the logits it has alone).\n";

// Tensor `name` of `file`, int64 [B, T] with B, T >= 1; undefined when absent.
at::Tensor read_int64_matrix(const io::SafetensorsFile& file, const std::string& name) {
  for (const io::StTensorInfo& t : file.header().tensors) {
    if (t.name != name) continue;
    if (t.dtype != io::StDtype::kI64 || t.shape.size() != 2 || t.shape[0] < 1 || t.shape[1] < 1) {
      throw ConfigError("forward: --inputs " + file.path() + ": " + name + " is " + io::name_of(t.dtype) + " of " +
                        std::to_string(t.shape.size()) + " dimension(s); it must be I64 [B, T] with B, T >= 1");
    }
    return at::from_blob(const_cast<std::uint8_t*>(file.bytes(t)), t.shape, at::TensorOptions().dtype(at::kLong))
        .clone();
  }
  return {};
}

struct Inputs {
  at::Tensor token_ids;
  at::Tensor attention_mask;  // undefined: every token is real
};

// token_ids of `path`, checked against the vocabulary, and its attention_mask against them.
Inputs read_inputs(const std::string& path, std::int64_t vocabulary) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(path);
  Inputs in{read_int64_matrix(file, "token_ids"), read_int64_matrix(file, "attention_mask")};
  if (!in.token_ids.defined()) {
    throw ConfigError("forward: --inputs " + path + " has no tensor named token_ids (int64 [B, T])");
  }
  if (in.token_ids.min().item<std::int64_t>() < 0 || in.token_ids.max().item<std::int64_t>() >= vocabulary) {
    throw ConfigError("forward: --inputs " + path + ": token_ids holds ids outside [0, " + std::to_string(vocabulary) +
                      "), the model's vocab_size");
  }
  if (!in.attention_mask.defined()) return in;
  if (!in.attention_mask.sizes().equals(in.token_ids.sizes())) {
    throw ConfigError("forward: --inputs " + path + ": attention_mask is " + c10::str(in.attention_mask.sizes()) +
                      ", token_ids " + c10::str(in.token_ids.sizes()) + "; they must be of one shape");
  }
  if (in.attention_mask.ne(0).logical_and(in.attention_mask.ne(1)).any().item<bool>()) {
    throw ConfigError("forward: --inputs " + path + ": attention_mask holds values other than 0 and 1");
  }
  return in;
}

at::Tensor logits_of(model::Model& model, const Inputs& inputs) {
  if (!inputs.attention_mask.defined()) return model.forward(inputs.token_ids);
  auto* masked = dynamic_cast<model::MaskedLanguageModel*>(&model);
  HT_CHECK(masked != nullptr, "forward's model takes no attention mask");
  const at::Tensor& tokens = inputs.token_ids;
  const at::Tensor positions = torch::arange(tokens.size(1), torch::kLong).expand_as(tokens);
  return masked->forward_masked(tokens, {inputs.attention_mask.to(torch::kBool), positions}, nullptr);
}

}  // namespace

int run_forward(const Args& args) {
  const std::vector<config::Flag> flags{{"model", true, ""}, {"inputs", true, ""}, {"out", true, ""}};
  if (wants_help(args)) {
    std::cout << kForwardUsage;
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, /*with_options=*/false, false);
  for (const char* flag : {"model", "inputs", "out"}) {
    if (!parsed.has(flag)) {
      throw ConfigError(std::string("forward: --") + flag + " is required (hpctrain forward --help)");
    }
  }
  config::ModelConfig m;
  m.name = config::ModelName::kLlama;
  m.init_from = parsed.flags.at("model");
  const config::DecoderConfig shape = config::read_decoder_config(m.init_from);
  const Inputs inputs = read_inputs(parsed.flags.at("inputs"), shape.vocab_size);
  const at::Tensor& tokens = inputs.token_ids;
  m.gpt_block_size = tokens.size(1);
  const weights::WeightFile file = weights::WeightFile::open(m.init_from);
  const std::shared_ptr<model::Model> model = model::make_model(m, {{m.gpt_block_size}, shape.vocab_size, true});
  weights::load_weights(*model, weights::map_weights(m, file), /*strict=*/true, m.init_from);
  model->module().eval();
  const torch::NoGradGuard no_grad;
  const at::Tensor logits = logits_of(*model, inputs).to(at::kFloat).contiguous();
  io::write_safetensors(parsed.flags.at("out"),
                        {{"logits", io::StDtype::kF32, logits.sizes().vec(), logits.data_ptr()}}, {{"format", "pt"}});
  log::info("forward: logits {} of {} written to {}", c10::str(logits.sizes()), m.init_from, parsed.flags.at("out"));
  return 0;
}

}  // namespace hpctrain::cli
