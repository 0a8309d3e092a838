// `hpctrain ckpt export FILE --format hf --out DIR`: a llama checkpoint as the Hugging Face model
// directory transformers' from_pretrained reads (config.json, model.safetensors or shards with
// model.safetensors.index.json, the source directory's tokenizer and generation files), or a LoRA
// run's adapters as the PEFT adapter directory PeftModel.from_pretrained reads. The tensors are
// read from the checkpoint one shard at a time, so a stage-3 run's checkpoint of a model larger
// than memory exports too. The directory appears whole or not at all.
#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "hpctrain/config/decoder_config.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/units.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/model/lora.h"
#include "hpctrain/weights/hf_writer.h"
#include "hpctrain/weights/weight_writer.h"
#include "ckpt_export.h"

namespace hpctrain::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::int64_t kMaxConfigBytes = 1 << 20;
constexpr const char* kDefaultShardSize = "5GB";  // transformers' save_pretrained's

// Files of a model directory that describe no weights, copied from the source directory when there.
constexpr const char* kSideFiles[] = {"generation_config.json", "tokenizer.json",   "tokenizer_config.json",
                                      "special_tokens_map.json", "tokenizer.model", "vocab.json",
                                      "merges.txt",              "added_tokens.json", "chat_template.jinja"};

// A directory written whole or not at all: files go into a sibling, renamed into place by
// publish(); left unpublished, the sibling is removed.
class StagedDirectory {
 public:
  explicit StagedDirectory(std::string target)
      : target_(std::move(target)), path_(target_ + ".partial-" + std::to_string(::getpid())) {
    std::error_code ec;
    if (fs::exists(target_, ec) && !(fs::is_directory(target_, ec) && fs::is_empty(target_, ec))) {
      throw ConfigError("ckpt export: --out " + target_ + " exists and is not an empty directory; name a new one");
    }
    sys::remove_tree(path_);
    if (!fs::create_directories(path_, ec)) {
      throw Error("ckpt export: cannot create " + path_ + " (" + ec.message() + ")", ExitCode::kUsage);
    }
  }
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;
  ~StagedDirectory() {
    if (published_) return;
    try {
      sys::remove_tree(path_);
    } catch (const std::exception&) {  // nothing more to do about it on the way out
    }
  }

  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }
  const std::string& path() const { return path_; }
  void publish() {
    sys::publish_atomically(path_, target_);
    published_ = true;
  }

 private:
  std::string target_;
  std::string path_;
  bool published_ = false;
};

void write_json(const std::string& path, const json& value) {
  std::ofstream out(path);
  out << value.dump(2) << "\n";
  if (!out) throw Error("ckpt export: cannot write " + path + " (check the path and free space)", ExitCode::kUsage);
}

at::ScalarType dtype_named(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw ConfigError("ckpt export: --dtype '" + name + "' is not float32, bfloat16 or float16");
}

const char* hf_dtype_name(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? "bfloat16" : dtype == at::kHalf ? "float16" : "float32";
}

// --dtype, else what config.json's torch_dtype says the model is kept in, else float32.
at::ScalarType export_dtype(const config::ParsedArgs& parsed, const std::string& torch_dtype) {
  if (parsed.has("dtype")) return dtype_named(parsed.flags.at("dtype"));
  return torch_dtype.empty() ? at::kFloat : dtype_named(torch_dtype);
}

// The model group's tensors as the writer reads them: one at a time, the moving average's in
// place of the trained ones with --ema. A tied output layer is left out, as transformers saves it.
std::vector<weights::TensorToWrite> checkpoint_tensors(const ckpt::CheckpointReader& reader,
                                                       const config::DecoderConfig& shape, bool average) {
  std::vector<weights::TensorToWrite> out;
  for (const ckpt::StoredTensor& t : reader.list_group(ckpt::group::kModel)) {
    if (shape.tie_word_embeddings && t.name == "lm_head.weight") continue;
    const char* group = average && reader.has(ckpt::group::kEma, t.name) ? ckpt::group::kEma : ckpt::group::kModel;
    if (group == ckpt::group::kEma && reader.stored_shape(group, t.name) != t.shape) {
      throw CheckpointError(reader.path() + ": ema/" + t.name + " has another shape than model/" + t.name);
    }
    out.push_back({t.name, t.shape, [&reader, group, name = t.name] { return reader.read_tensor(group, name); }});
  }
  return out;
}

std::vector<weights::TensorToWrite> in_memory(const ckpt::NamedTensors& tensors, const config::DecoderConfig& shape) {
  std::vector<weights::TensorToWrite> out;
  for (const auto& [name, tensor] : tensors) {
    if (shape.tie_word_embeddings && name == "lm_head.weight") continue;
    out.push_back({name, tensor.sizes().vec(), [tensor = tensor] { return tensor; }});
  }
  return out;
}

// config.json as the source directory has it (`file`, the one read_decoder_config read), with the
// dtype of the weights written.
void write_model_config(const StagedDirectory& dir, const std::string& file, at::ScalarType dtype) {
  json config = json::parse(sys::read_small_file<ConfigError>(file, kMaxConfigBytes, "the model's config.json"),
                            nullptr, false);
  if (!config.is_object()) throw ConfigError(file + ": not a JSON object; not a model's config.json");
  config["torch_dtype"] = hf_dtype_name(dtype);
  write_json(dir.file("config.json"), config);
  for (const char* name : kSideFiles) {
    const fs::path side = fs::path(file).parent_path() / name;
    std::error_code ec;
    if (!fs::is_regular_file(side, ec)) continue;
    fs::copy_file(side, dir.file(name), ec);
    if (ec) throw Error("ckpt export: cannot copy " + side.string() + " (" + ec.message() + ")", ExitCode::kUsage);
  }
}

// PEFT's target_modules: the options' module names when they are plain names (PEFT matches them
// as hpctrain does, as the last parts of a module's name), else every adapted module by name.
json target_modules(const config::ModelConfig& model, const ckpt::NamedTensors& adapters) {
  const std::vector<std::string> items = model::lora_target_items(model);
  const bool all_plain = std::all_of(items.begin(), items.end(), [](const std::string& item) {
    return item != "all-linear" && item.find_first_of("*?[.") == std::string::npos;
  });
  if (all_plain) return items;
  std::set<std::string> modules;
  for (const auto& [name, tensor] : adapters) {
    if (model::is_adapter_parameter(name)) modules.insert(name.substr(0, name.rfind(".lora_")));
  }
  return std::vector<std::string>(modules.begin(), modules.end());
}

void write_adapter(const StagedDirectory& dir, const config::Config& config, ckpt::NamedTensors adapters,
                   at::ScalarType dtype) {
  const config::ModelConfig& m = config.model;
  if (m.lora_train.find("norm") != std::string::npos) {
    throw ConfigError("ckpt export --format hf: this run trained the norms too (model.lora_train=norm), which a PEFT "
                      "adapter cannot hold; export the merged model with --merge");
  }
  const json adapter{{"peft_type", "LORA"},
                     {"task_type", "CAUSAL_LM"},
                     {"r", m.lora_rank},
                     {"lora_alpha", m.lora_alpha},
                     {"lora_dropout", m.lora_dropout},
                     {"target_modules", target_modules(m, adapters)},
                     {"fan_in_fan_out", false},
                     {"bias", m.lora_train.find("bias") != std::string::npos ? "all" : "none"},
                     {"base_model_name_or_path", m.init_from},
                     {"inference_mode", true}};
  write_json(dir.file("adapter_config.json"), adapter);
  for (auto& [name, tensor] : adapters) {
    name = "base_model.model." + name;  // PEFT's prefix; its adapter name is left out of saved files
    tensor = tensor.to(dtype);
  }
  weights::write_weights(dir.file("adapter_model.safetensors"), adapters, weights::WeightFormat::kSafetensors, {});
}

// What the export was asked for, read from the checkpoint and the command line and checked.
struct ExportRequest {
  config::Config config;       // the run's
  config::DecoderConfig shape;  // of its config.json, whose path is shape.where
  bool adapters = false;       // a LoRA run's checkpoint
  bool merge = false;
  bool average = false;        // --ema
  std::string out;
};

ExportRequest export_request(const ckpt::CheckpointReader& reader, const config::ParsedArgs& parsed) {
  if (reader.meta().model_name != "llama") {
    throw ConfigError("ckpt export --format hf writes a model.name=llama checkpoint as a Hugging Face directory; " +
                      reader.path() + " holds model " + reader.meta().model_name +
                      " (a gpt's: --format safetensors --names hf-gpt2)");
  }
  if (parsed.has("names")) {
    throw ConfigError("ckpt export --format hf names tensors as transformers does; drop --names");
  }
  if (!parsed.has("out")) throw ConfigError("ckpt export: --out DIR is required");
  ExportRequest r;
  r.config = checkpoint_config(reader);
  r.shape = config::read_decoder_config(config::decoder_config_path(r.config.model));
  r.adapters = reader.has_group(ckpt::group::kBase);
  r.merge = parsed.has("merge");
  r.average = parsed.has("ema");
  r.out = parsed.flags.at("out");
  if (r.merge && !r.adapters) {
    throw ConfigError("ckpt export --merge folds LoRA adapters into their base; " + reader.path() +
                      " holds none (not a model.lora_rank run): drop --merge");
  }
  if (r.average && !reader.has_group(ckpt::group::kEma)) {
    throw ConfigError("ckpt export --ema: " + reader.path() + " holds no moving average (train.ema_decay was 0)");
  }
  if (r.merge && r.shape.tie_word_embeddings && reader.has(ckpt::group::kModel, "lm_head.lora_A.weight")) {
    throw ConfigError("ckpt export --merge: the adapter on the output layer cannot be merged: it is the token "
                      "embedding (tie_word_embeddings), which merging would change for the inputs too; export the "
                      "adapters without --merge");
  }
  return r;
}

int export_adapter_directory(const ckpt::CheckpointReader& reader, const config::ParsedArgs& parsed,
                             const ExportRequest& r) {
  StagedDirectory dir(r.out);
  ckpt::NamedTensors tensors = reader.read_group(ckpt::group::kModel);
  if (r.average) tensors = averaged(reader, std::move(tensors));
  const std::size_t count = tensors.size();
  const at::ScalarType dtype = parsed.has("dtype") ? dtype_named(parsed.flags.at("dtype")) : at::kFloat;
  write_adapter(dir, r.config, std::move(tensors), dtype);
  dir.publish();
  std::cout << "exported the LoRA adapters of model llama (" << count << " tensor(s)) as a PEFT adapter directory "
            << r.out << "\n";
  return 0;
}

int export_model_directory(const ckpt::CheckpointReader& reader, const config::ParsedArgs& parsed,
                           const ExportRequest& r) {
  const std::int64_t max_shard = parse_bytes(
      parsed.has("max-shard-size") ? parsed.flags.at("max-shard-size") : kDefaultShardSize, "--max-shard-size");
  const at::ScalarType dtype = export_dtype(parsed, r.shape.torch_dtype);
  StagedDirectory dir(r.out);
  const weights::Weights which = r.average ? weights::Weights::kAverageIfKept : weights::Weights::kTrained;
  const ckpt::NamedTensors merged = r.merge ? merged_weights(reader, r.config, which) : ckpt::NamedTensors{};
  const std::vector<weights::TensorToWrite> tensors =
      r.merge ? in_memory(merged, r.shape) : checkpoint_tensors(reader, r.shape, r.average);
  const weights::HfWeightsWritten written = weights::write_hf_weights(dir.path(), tensors, dtype, max_shard);
  write_model_config(dir, r.shape.where, dtype);
  dir.publish();
  std::cout << "exported model llama" << (r.merge ? " with its adapters merged" : "")
            << (r.average ? " (the moving average)" : "") << " as a Hugging Face directory " << r.out << ": "
            << written.files << " safetensors file(s), " << bytes_text(written.total_bytes) << " in "
            << hf_dtype_name(dtype) << "\n";
  return 0;
}

}  // namespace

int export_hf_directory(const ckpt::CheckpointReader& reader, const config::ParsedArgs& parsed) {
  const ExportRequest request = export_request(reader, parsed);
  if (request.adapters && !request.merge) return export_adapter_directory(reader, parsed, request);
  return export_model_directory(reader, parsed, request);
}

}  // namespace hpctrain::cli
