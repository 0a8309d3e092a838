// `hpctrain ckpt inspect|verify|export`: look inside a checkpoint, check every checksum, and hand
// the trained model to other tools as a PyTorch state_dict or a safetensors file. Single process;
// no MPI.
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/config/decoder_config.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/data/manifest.h"
#include "hpctrain/data/token_stream.h"
#include "hpctrain/io/h5_file.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/launch/commands.h"
#include "hpctrain/model/lora.h"
#include "hpctrain/weights/gpt2_names.h"
#include "hpctrain/weights/init_from.h"
#include "hpctrain/weights/model_weights.h"
#include "hpctrain/weights/weight_writer.h"
#include "ckpt_export.h"

namespace hpctrain::cli {
namespace {

const char* kCkptUsage =
    "usage: hpctrain ckpt inspect FILE\n"
    "       hpctrain ckpt verify FILE\n"
    "       hpctrain ckpt export FILE --out OUT [--format pytorch|safetensors] [--names hpctrain|hf-gpt2]\n"
    "                            [--merge] [--ema]\n"
    "       hpctrain ckpt export FILE --format hf --out DIR [--dtype float32|bfloat16|float16]\n"
    "                            [--max-shard-size 5GB] [--merge] [--ema]\n\n"
    "inspect: the metadata (step, epoch, sampler cursor, world size, versions, config) and every\n"
    "         tensor with its dtype, shape and size, group by group.\n"
    "verify:  reads every tensor, so every fletcher32 checksum is checked; exit 4 names the\n"
    "         first bad one.\n"
    "export:  the model's parameters and buffers as a PyTorch state_dict (the default; torch.load\n"
    "         reads it: model.load_state_dict(torch.load(\"OUT\"))) or a .safetensors file; with\n"
    "         --names hf-gpt2 a gpt model gets Hugging Face GPT-2's names and Conv1D layout, which\n"
    "         GPT2LMHeadModel loads. model.init_from reads either back. docs/checkpoint-format.md.\n"
    "         Of a LoRA run (model.lora_rank > 0): the adapters alone, with --names hf-gpt2 in PEFT's\n"
    "         adapter_model.safetensors names and an adapter_config.json beside OUT; with --merge,\n"
    "         the whole model with the adapters folded into the base (W + alpha/r B A).\n"
    "         docs/fine-tuning.md. --ema: the moving average of the trained weights (a run with\n"
    "         train.ema_decay) in their place.\n"
    "         --format hf (model.name=llama): a Hugging Face model directory, as transformers'\n"
    "         from_pretrained reads it: config.json (torch_dtype as written), model.safetensors or\n"
    "         shards of at most --max-shard-size with model.safetensors.index.json, and the source\n"
    "         directory's tokenizer and generation files; --dtype defaults to config.json's torch_dtype.\n"
    "         Tensors are read one shard at a time, never the whole model at once (a stage-3 run's too).\n"
    "         Of a LoRA run: a PEFT adapter directory (adapter_config.json, adapter_model.safetensors);\n"
    "         with --merge, the whole model, adapters folded in. DIR must be new or empty; it appears\n"
    "         whole or not at all.\n";

int inspect(const ckpt::CheckpointReader& reader) {
  const ckpt::CheckpointMeta& m = reader.meta();
  std::cout << "checkpoint " << reader.path() << "\n"
            << "  format version " << m.format_version << ", written by hpctrain " << m.hpctrain_version
            << " at " << m.created << " on " << m.world_size << " rank(s)\n"
            << "  model " << m.model_name << ", step " << m.step << ", epoch " << m.epoch + 1
            << " (0-based " << m.epoch << "), sampler cursor " << m.cursor << "\n";
  for (const char* group : ckpt::kGroups) {
    const ckpt::NamedTensors tensors = reader.read_group(group);
    if (tensors.empty()) continue;
    std::int64_t bytes = 0;
    for (const auto& [name, tensor] : tensors) bytes += static_cast<std::int64_t>(tensor.nbytes());
    std::cout << "/" << group << ": " << tensors.size() << " tensor(s), " << std::fixed << std::setprecision(2)
              << static_cast<double>(bytes) / 1e6 << " MB\n";
    for (const auto& [name, tensor] : tensors) {
      std::cout << "  " << std::left << std::setw(40) << name << " " << c10::toString(tensor.scalar_type())
                << c10::str(tensor.sizes()) << "\n";
    }
  }
  std::cout << "config:\n" << m.config_text;
  return 0;
}

int verify(const ckpt::CheckpointReader& reader) {
  const Timer timer;
  const std::int64_t tensors = reader.verify();
  std::cout << "verify: " << reader.path() << " OK, " << tensors << " tensor(s) read and checksummed in "
            << std::fixed << std::setprecision(2) << timer.elapsed_s() << " s\n";
  return 0;
}

// --format (pytorch, safetensors; hf is export_hf_directory's), with --to state_dict kept as the
// older spelling of pytorch.
weights::WeightFormat export_format(const config::ParsedArgs& parsed) {
  const std::string format = parsed.has("format") ? parsed.flags.at("format") : "pytorch";
  const std::string to = parsed.has("to") ? parsed.flags.at("to") : "state_dict";
  if (to != "state_dict") {
    throw ConfigError("ckpt export: --to '" + to + "' is not a format; use --format pytorch|safetensors (a "
                      "TorchScript export needs the model in Python, see docs/checkpoint-format.md)");
  }
  if (format == "pytorch") return weights::WeightFormat::kPytorch;
  if (format == "safetensors") return weights::WeightFormat::kSafetensors;
  throw ConfigError("ckpt export: --format '" + format + "' is not pytorch, safetensors or hf");
}

// The shapes of the model `config` trains: a gpt's vocabulary from its model.init_from (or the
// dataset), any other model's input and classes from the dataset's manifest.
model::ModelSpec trained_model_spec(const config::Config& config) {
  const config::ModelConfig& m = config.model;
  std::int64_t vocabulary = 0;
  if (m.name == config::ModelName::kGpt && !m.init_from.empty()) {
    const weights::WeightFile file = weights::WeightFile::open(m.init_from);
    config::ModelConfig shape = m;
    weights::fill_gpt_shape(shape, weights::map_weights(shape, file).tensors, vocabulary);
  }
  if (m.name == config::ModelName::kLlama) {
    vocabulary = config::read_decoder_config(config::decoder_config_path(m)).vocab_size;
  }
  if (vocabulary != 0) return {{m.gpt_block_size}, vocabulary, true};
  const data::Manifest manifest = data::Manifest::load(config.data.path);
  if (data::is_token_stream(manifest)) return {{m.gpt_block_size}, manifest.num_classes, true};
  return {manifest.fields.front().shape, manifest.num_classes};
}

// PEFT's adapter_config.json for the adapters of `config`, written beside `out`.
std::string write_adapter_config(const std::string& out, const config::ModelConfig& config) {
  static const std::map<std::string, std::string> kModules{
      {"attn", "attn.c_attn"}, {"proj", "attn.c_proj"}, {"fc", "mlp.c_fc"}, {"mlp_proj", "mlp.c_proj"},
      {"head", "lm_head"}};
  std::vector<std::string> modules;
  for (const std::string& target : model::lora_targets(config)) modules.push_back(kModules.at(target));
  const nlohmann::json adapter{{"peft_type", "LORA"},
                               {"task_type", "CAUSAL_LM"},
                               {"r", config.lora_rank},
                               {"lora_alpha", config.lora_alpha},
                               {"lora_dropout", config.lora_dropout},
                               {"target_modules", modules},
                               {"fan_in_fan_out", true},
                               {"bias", config.lora_train.find("bias") != std::string::npos ? "all" : "none"},
                               {"base_model_name_or_path", config.init_from},
                               {"inference_mode", true}};
  const std::string path = (std::filesystem::path(out).parent_path() / "adapter_config.json").string();
  std::ofstream file(path);
  file << adapter.dump(2) << "\n";
  if (!file) throw ConfigError("ckpt export: cannot write " + path);
  return path;
}

int export_weights(const ckpt::CheckpointReader& reader, const config::ParsedArgs& parsed) {
  const weights::WeightFormat format = export_format(parsed);
  if (!parsed.has("out")) throw ConfigError("ckpt export: --out FILE is required");
  const std::string names = parsed.has("names") ? parsed.flags.at("names") : "hpctrain";
  const std::string& model = reader.meta().model_name;
  if (names != "hpctrain" && names != "hf-gpt2") {
    throw ConfigError("ckpt export: --names '" + names + "' is not hpctrain or hf-gpt2");
  }
  if (names == "hf-gpt2" && model != "gpt") {
    throw ConfigError("ckpt export: --names hf-gpt2 renames a gpt model's weights; this checkpoint holds model " + model);
  }
  const bool adapters = reader.has_group(ckpt::group::kBase);  // a LoRA run's (weights/lora_base.h)
  const bool merge = parsed.has("merge");
  if (merge && !adapters) {
    throw ConfigError("ckpt export --merge folds LoRA adapters into their base; " + reader.path() +
                      " holds none (no /base group: not a model.lora_rank run): drop --merge");
  }
  // Only a LoRA checkpoint's config is read: the adapters' options, and the base to merge into.
  const config::Config config = adapters ? checkpoint_config(reader) : config::Config{};
  const bool average = parsed.has("ema");
  if (average && !reader.has_group(ckpt::group::kEma)) {
    throw ConfigError("ckpt export --ema exports the moving average of the weights; " + reader.path() +
                      " holds none (no /ema group: train.ema_decay was 0): drop --ema");
  }
  ckpt::NamedTensors tensors =
      merge ? merged_weights(reader, config, average ? weights::Weights::kAverageIfKept : weights::Weights::kTrained)
            : reader.read_group(ckpt::group::kModel);
  if (tensors.empty()) throw CheckpointError(reader.path() + ": has no /model tensors to export");
  if (average && !merge) tensors = averaged(reader, std::move(tensors));
  const std::string out = parsed.flags.at("out");
  std::string what = "model " + model;
  if (adapters && !merge) {
    what = "LoRA adapters of model " + model;
    if (names == "hf-gpt2") {
      for (auto& [name, tensor] : tensors) name = "base_model.model." + name;  // PEFT's prefix
      std::cout << "wrote " << write_adapter_config(out, config.model) << "\n";
    }
  } else if (names == "hf-gpt2") {
    tensors = weights::to_hf_gpt2(tensors);
  }
  weights::write_weights(out, tensors, format,
                         {{"hpctrain_model", model}, {"hpctrain_step", std::to_string(reader.meta().step)},
                          {"hpctrain_names", names}});
  std::cout << "exported " << tensors.size() << " tensor(s) of " << what << (merge ? ", merged," : "")
            << (average ? " (their moving average)" : "") << " ("
            << names << " names) to " << out << " (" << weights::name_of(format) << ")\n";
  return 0;
}

}  // namespace

ckpt::NamedTensors merged_weights(const ckpt::CheckpointReader& reader, const config::Config& config,
                                  weights::Weights which) {
  if (config.model.name == config::ModelName::kGpt && model::lora_targets(config.model).count("head") != 0) {
    throw ConfigError("ckpt export --merge: the adapter on the head (model.lora_targets=head) cannot be merged: the "
                      "head is the token embedding's weight, which merging would change for the inputs too; export "
                      "the adapters without --merge");
  }
  const std::shared_ptr<model::Model> model = checkpoint_model(reader, config, trained_model_spec(config), which);
  ckpt::NamedTensors weights = weights::all_weights(*model);
  for (auto& [name, tensor] : weights) {
    if (tensor.is_floating_point()) tensor = tensor.to(at::kFloat);  // a bf16 base's merged in full
  }
  ckpt::NamedTensors merged = model::merge_adapters(weights, model::lora_options(config.model).scale());
  // A tied weight's second name holds what its first does, merged (a TorchScript model's).
  std::map<std::string, at::Tensor> by_name(merged.begin(), merged.end());
  for (const model::TiedParameter& tied : model->tied_parameters()) {
    for (auto& [name, tensor] : merged) {
      if (name == tied.name) tensor = by_name.at(tied.same_as);
    }
  }
  return merged;
}

// One the model group lacks, or of another shape, is a damaged file.
ckpt::NamedTensors averaged(const ckpt::CheckpointReader& reader, ckpt::NamedTensors tensors) {
  std::map<std::string, at::Tensor*> by_name;
  for (auto& [name, tensor] : tensors) by_name[name] = &tensor;
  for (auto& [name, average] : reader.read_group(ckpt::group::kEma)) {
    const auto found = by_name.find(name);
    if (found == by_name.end() || !found->second->sizes().equals(average.sizes()) ||
        found->second->scalar_type() != average.scalar_type()) {
      throw CheckpointError(reader.path() + ": ema/" + name + " has no weight of its name, shape and dtype in /model");
    }
    *found->second = average;
  }
  return tensors;
}

int run_ckpt(const Args& args) {
  const std::vector<config::Flag> flags{
      {"format", true, ""}, {"names", true, ""}, {"to", true, ""},     {"out", true, ""},
      {"merge", false, ""}, {"ema", false, ""},  {"dtype", true, ""}, {"max-shard-size", true, ""}};
  if (wants_help(args)) {
    std::cout << kCkptUsage;
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, /*with_options=*/false, false);
  const std::string action = parsed.positionals.empty() ? "" : parsed.positionals.front();
  if (action != "inspect" && action != "verify" && action != "export") {
    throw ConfigError("ckpt: expected 'inspect', 'verify' or 'export' (see hpctrain ckpt --help)");
  }
  if (parsed.positionals.size() != 2) throw ConfigError("ckpt " + action + ": give one checkpoint FILE");
  const ckpt::CheckpointReader reader(parsed.positionals[1]);
  if (action == "inspect") return inspect(reader);
  if (action == "verify") return verify(reader);
  if (parsed.has("format") && parsed.flags.at("format") == "hf") return export_hf_directory(reader, parsed);
  for (const char* flag : {"dtype", "max-shard-size"}) {
    if (parsed.has(flag)) throw ConfigError(std::string("ckpt export: --") + flag + " is for --format hf");
  }
  return export_weights(reader, parsed);
}

}  // namespace hpctrain::cli
