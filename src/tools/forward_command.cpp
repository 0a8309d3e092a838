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
#include "hpctrain/model/model.h"
#include "hpctrain/weights/init_from.h"

namespace hpctrain::cli {
namespace {

const char* kForwardUsage =
    "usage: hpctrain forward --model DIR --inputs FILE --out FILE\n\n"
    "Runs a Hugging Face model directory's forward (model.name=llama: config.json and its safetensors) on\n"
    "the token ids of a safetensors file and writes the logits as safetensors:\n"
    "  --model DIR     the model directory\n"
    "  --inputs FILE   a safetensors file with token_ids, int64 [B, T]\n"
    "  --out FILE      written with logits, float32 [B, T, vocab_size]\n"
    "One process on the CPU, in float32, as transformers' model(input_ids).logits computes them.\n";

// token_ids of `path`, checked against the vocabulary.
at::Tensor read_token_ids(const std::string& path, std::int64_t vocabulary) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(path);
  for (const io::StTensorInfo& t : file.header().tensors) {
    if (t.name != "token_ids") continue;
    if (t.dtype != io::StDtype::kI64 || t.shape.size() != 2 || t.shape[0] < 1 || t.shape[1] < 1) {
      throw ConfigError("forward: --inputs " + path + ": token_ids is " + io::name_of(t.dtype) + " of " +
                        std::to_string(t.shape.size()) + " dimension(s); it must be I64 [B, T] with B, T >= 1");
    }
    const at::Tensor ids =
        at::from_blob(const_cast<std::uint8_t*>(file.bytes(t)), t.shape, at::TensorOptions().dtype(at::kLong)).clone();
    if (ids.min().item<std::int64_t>() < 0 || ids.max().item<std::int64_t>() >= vocabulary) {
      throw ConfigError("forward: --inputs " + path + ": token_ids holds ids outside [0, " +
                        std::to_string(vocabulary) + "), the model's vocab_size");
    }
    return ids;
  }
  throw ConfigError("forward: --inputs " + path + " has no tensor named token_ids (int64 [B, T])");
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
  const at::Tensor tokens = read_token_ids(parsed.flags.at("inputs"), shape.vocab_size);
  m.gpt_block_size = tokens.size(1);
  const weights::WeightFile file = weights::WeightFile::open(m.init_from);
  const std::shared_ptr<model::Model> model = model::make_model(m, {{m.gpt_block_size}, shape.vocab_size, true});
  weights::load_weights(*model, weights::map_weights(m, file), /*strict=*/true, m.init_from);
  model->module().eval();
  const torch::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(tokens).to(at::kFloat).contiguous();
  io::write_safetensors(parsed.flags.at("out"),
                        {{"logits", io::StDtype::kF32, logits.sizes().vec(), logits.data_ptr()}}, {{"format", "pt"}});
  log::info("forward: logits {} of {} written to {}", c10::str(logits.sizes()), m.init_from, parsed.flags.at("out"));
  return 0;
}

}  // namespace hpctrain::cli
