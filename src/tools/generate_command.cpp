// `hpctrain generate`: a language model (gpt, or a scripted one) continues prompts, in the
// tokenizer of the data it was trained on. Under mpirun the prompts are shared out among the
// ranks; rank 0 writes one JSON object per prompt, in prompt order.
#include <torch/nn/module.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/config/decoder_config.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/data/manifest.h"
#include "hpctrain/data/hf_tokenizer.h"
#include "hpctrain/data/tokenizer.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/launch/commands.h"
#include "hpctrain/model/generate.h"
#include "hpctrain/model/language_model.h"
#include "hpctrain/runtime/device.h"
#include "hpctrain/weights/init_from.h"

namespace hpctrain::cli {
namespace {

using json = nlohmann::json;

const char* kGenerateUsage =
    "usage: [mpirun -np N] hpctrain generate (--checkpoint FILE | --weights FILE --config FILE)\n"
    "           (--prompt TEXT | --prompts FILE) [--max-new-tokens N] [--temperature T] [--top-k K]\n"
    "           [--top-p P] [--seed S] [--tokenizer bytes|DATASET|TOKENIZER_JSON] [--no-kv-cache] [--batch-size B]\n"
    "           [--ignore-eos] [--out FILE]\n\n"
    "Continues each prompt with a language model (model.name=gpt or llama, or a scripted language model):\n"
    "  --checkpoint FILE    a checkpoint of `hpctrain train`; its config gives the model and data\n"
    "                       (and with train.ema_decay, its moving average gives the weights)\n"
    "  --weights FILE       weights as model.init_from reads them (safetensors, a Hugging Face model\n"
    "                       directory, torch.save, a checkpoint), with --config FILE\n"
    "                       [--section.key=value] for the model (model.name=llama: its config.json\n"
    "                       is the directory's unless model.hf_config names one)\n"
    "  --prompts FILE       one prompt per line (empty lines skipped)\n"
    "  --max-new-tokens N   tokens to add (default 64)\n"
    "  --temperature T      0: greedy, deterministic; default 1\n"
    "  --top-k K, --top-p P keep the K most likely tokens (0: all), the most likely whose\n"
    "                       probabilities sum to P (default 1: all)\n"
    "                       (llama: a model directory's generation_config.json gives the defaults\n"
    "                       as transformers takes them: greedy unless do_sample, then its\n"
    "                       temperature, top_p and top_k, 50 if it has none)\n"
    "  --seed S             sampling is reproducible from it, at any rank count (default 0)\n"
    "  --tokenizer          bytes, a dataset directory of `prepare text` whose tokenizer to use, or a\n"
    "                       Hugging Face tokenizer.json (or the model directory holding it); default:\n"
    "                       that of the config's data.path, else --weights DIR's tokenizer.json\n"
    "  --no-kv-cache        recompute the whole context for every token (gpt and llama cache by\n"
    "                       default)\n"
    "  --batch-size B       continue up to B prompts together (default 1; a batch may round the\n"
    "                       logits' last bits otherwise than one prompt): llama pads prompts of\n"
    "                       different lengths on the left, other models batch prompts of one length\n"
    "  --ignore-eos         continue past the end-of-sequence ids (llama: generation_config.json's\n"
    "                       eos_token_id, else config.json's; one id or a list), to max-new-tokens\n"
    "  --out FILE           JSONL: prompt, completion, tokens (the new ids, an EOS left out),\n"
    "                       finish_reason (stop: at an EOS id; length: at max-new-tokens),\n"
    "                       tokens_per_s; default standard output\n";

double number_flag(const config::ParsedArgs& parsed, const std::string& name, double fallback) {
  if (!parsed.has(name)) return fallback;
  const std::string& text = parsed.flags.at(name);
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value >= 0)) {
    throw ConfigError("generate: --" + name + " must be a number >= 0, not '" + text + "'");
  }
  return value;
}

model::SamplingOptions sampling_options(const config::ParsedArgs& parsed) {
  model::SamplingOptions o;
  o.max_new_tokens = int_flag(parsed, "generate", "max-new-tokens", "64");
  o.temperature = number_flag(parsed, "temperature", 1.0);
  o.top_k = int_flag(parsed, "generate", "top-k", "0");
  o.top_p = number_flag(parsed, "top-p", 1.0);
  o.seed = static_cast<std::uint64_t>(int_flag(parsed, "generate", "seed", "0"));
  o.kv_cache = !parsed.has("no-kv-cache");
  if (o.top_p <= 0 || o.top_p > 1) throw ConfigError("generate: --top-p must be in (0, 1]");
  return o;
}

// A llama model directory's generation_config.json (and config.json's EOS ids) for what the
// command line leaves unsaid.
void apply_generation_defaults(model::SamplingOptions& o, const config::ParsedArgs& parsed,
                               const config::ModelConfig& model) {
  if (model.name != config::ModelName::kLlama) return;
  const std::string source = config::decoder_config_path(model);
  const config::GenerationDefaults g = config::read_generation_config(source);
  if (!parsed.has("ignore-eos")) {
    o.stop_ids = g.eos_token_ids.empty() ? config::read_decoder_config(source).eos_token_ids : g.eos_token_ids;
  }
  if (!g.present) return;
  if (!parsed.has("temperature")) o.temperature = g.do_sample ? g.temperature : 0.0;
  if (!parsed.has("top-p")) o.top_p = g.top_p;
  if (!parsed.has("top-k")) o.top_k = g.top_k;
}

std::vector<std::string> read_prompts(const config::ParsedArgs& parsed) {
  if (parsed.has("prompt") == parsed.has("prompts")) throw ConfigError("generate: give --prompt TEXT or --prompts FILE");
  if (parsed.has("prompt")) return {parsed.flags.at("prompt")};
  std::ifstream in(parsed.flags.at("prompts"));
  if (!in) throw ConfigError("generate: cannot read --prompts " + parsed.flags.at("prompts"));
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) prompts.push_back(line);
  }
  if (prompts.empty()) throw ConfigError("generate: --prompts " + parsed.flags.at("prompts") + " holds no prompt");
  return prompts;
}

// The tokenizer named by --tokenizer, else data.path's, else the tokenizer.json of `model_dir`
// (--weights DIR); and the vocabulary the model has.
std::unique_ptr<data::Tokenizer> tokenizer_for(const config::ParsedArgs& parsed, const config::Config& config,
                                               const std::string& model_dir, std::int64_t& vocabulary) {
  namespace fs = std::filesystem;
  std::string source = parsed.has("tokenizer") ? parsed.flags.at("tokenizer") : config.data.path;
  if (source.empty() && !model_dir.empty() && fs::exists(fs::path(model_dir) / "tokenizer.json")) source = model_dir;
  if (source.empty()) {
    throw ConfigError("generate: a tokenizer is needed to turn the prompts into tokens, and the config has no "
                      "data.path to take it from; name one with --tokenizer bytes (byte tokens), --tokenizer "
                      "DATASET (a directory of `hpctrain prepare text`) or --tokenizer TOKENIZER_JSON");
  }
  if (source == "bytes") {
    vocabulary = 256;
    return data::make_byte_tokenizer();
  }
  // A tokenizer.json, or a model directory holding one (and no dataset's manifest.json).
  if (fs::is_regular_file(source) ||
      (fs::exists(fs::path(source) / "tokenizer.json") && !fs::exists(fs::path(source) / "manifest.json"))) {
    std::unique_ptr<data::HfTokenizer> tokenizer = data::HfTokenizer::load(source);
    vocabulary = tokenizer->vocabulary_size();
    return tokenizer;
  }
  const data::Manifest manifest = data::Manifest::load(source);
  vocabulary = manifest.num_classes;
  return data::dataset_tokenizer(source, manifest);
}

struct Loaded {
  config::Config config;
  std::shared_ptr<model::Model> model;
  std::unique_ptr<data::Tokenizer> tokenizer;
};

Loaded load_model(const config::ParsedArgs& parsed) {
  Loaded loaded;
  std::int64_t vocabulary = 0;
  if (parsed.has("checkpoint") == parsed.has("weights")) {
    throw ConfigError("generate: give --checkpoint FILE, or --weights FILE with --config FILE");
  }
  if (parsed.has("checkpoint")) {
    if (!parsed.config_file.empty()) throw ConfigError("generate: --checkpoint carries its config; drop --config");
    const ckpt::CheckpointReader reader(parsed.flags.at("checkpoint"));
    loaded.config = checkpoint_config(reader);
    loaded.tokenizer = tokenizer_for(parsed, loaded.config, "", vocabulary);
    const config::ModelConfig& m = loaded.config.model;
    loaded.model = checkpoint_model(reader, loaded.config, {{m.gpt_block_size}, vocabulary, true},
                                    weights::Weights::kAverageIfKept);
    return loaded;
  }
  if (parsed.config_file.empty()) throw ConfigError("generate: --weights needs --config FILE for the model");
  loaded.config = parsed.config;
  config::ModelConfig& model = loaded.config.model;
  if (model.name == config::ModelName::kLlama) {
    // A model directory's config.json gives the shape, and its context the longest sequence.
    if (model.hf_config.empty()) model.hf_config = parsed.flags.at("weights");
    model.gpt_block_size = model::context_length(config::read_decoder_config(model.hf_config));
  }
  const weights::WeightFile file = weights::WeightFile::open(parsed.flags.at("weights"));
  const weights::MappedWeights mapped = weights::map_weights(loaded.config.model, file);
  weights::resolve_gpt_activation(loaded.config.model, mapped.names);
  std::int64_t file_vocabulary = 0;
  if (loaded.config.model.name == config::ModelName::kGpt) {
    weights::fill_gpt_shape(loaded.config.model, mapped.tensors, file_vocabulary);
  }
  const bool model_dir = std::filesystem::is_directory(parsed.flags.at("weights"));
  loaded.tokenizer = tokenizer_for(parsed, loaded.config, model_dir ? parsed.flags.at("weights") : "", vocabulary);
  if (file_vocabulary != 0 && file_vocabulary != vocabulary) {
    throw ConfigError("generate: " + file.path() + " has a vocabulary of " + std::to_string(file_vocabulary) +
                      " tokens, the tokenizer " + std::to_string(vocabulary) + "; name the weights' own with --tokenizer");
  }
  const config::ModelConfig& m = loaded.config.model;
  loaded.model = model::make_model(m, {{m.gpt_block_size}, vocabulary, true});
  weights::load_weights(*loaded.model, mapped, /*strict=*/true, file.path());
  return loaded;
}

// One prompt's result; its tokens/s over the time of the batch it was made in (so a batch's
// lines sum to the batch's rate).
std::string result_line(std::size_t index, const std::string& prompt, const model::Continuation& continuation,
                        const data::Tokenizer& tokenizer, double seconds) {
  const std::vector<std::int32_t>& tokens = continuation.tokens;
  const json record{{"index", index},
                    {"prompt", prompt},
                    {"completion", tokenizer.decode(tokens)},
                    {"tokens", tokens},
                    {"finish_reason", continuation.stopped ? "stop" : "length"},
                    {"tokens_per_s", seconds > 0 ? static_cast<double>(tokens.size()) / seconds : 0.0}};
  return record.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

// This rank's prompts (every world-th, from its rank) in batches of up to `batch`: in prompt
// order where the model pads prompts of different lengths, else of one token length each.
std::vector<std::vector<std::size_t>> batches(const std::vector<std::vector<std::int32_t>>& ids, bool any_lengths,
                                              std::int64_t batch, int rank, int world) {
  std::map<std::size_t, std::vector<std::size_t>> by_length;  // token count (0: any) -> prompt indices
  for (std::size_t i = static_cast<std::size_t>(rank); i < ids.size(); i += static_cast<std::size_t>(world)) {
    by_length[any_lengths ? 0 : ids[i].size()].push_back(i);
  }
  std::vector<std::vector<std::size_t>> out;
  for (const auto& [length, indices] : by_length) {
    for (std::size_t first = 0; first < indices.size(); first += static_cast<std::size_t>(batch)) {
      const std::size_t last = std::min(indices.size(), first + static_cast<std::size_t>(batch));
      out.emplace_back(indices.begin() + static_cast<std::ptrdiff_t>(first),
                       indices.begin() + static_cast<std::ptrdiff_t>(last));
    }
  }
  return out;
}

// This rank's prompts continued, one JSON line each.
std::string continue_prompts(const Loaded& loaded, const std::vector<std::string>& prompts,
                             const model::SamplingOptions& options, std::int64_t batch, int rank, int world,
                             c10::Device device) {
  const std::int64_t context = loaded.config.model.gpt_block_size;
  std::vector<std::vector<std::int32_t>> ids(prompts.size());
  std::int64_t longest = 0;
  for (std::size_t i = static_cast<std::size_t>(rank); i < prompts.size(); i += static_cast<std::size_t>(world)) {
    ids[i] = loaded.tokenizer->encode(prompts[i]);
    if (ids[i].empty()) throw ConfigError("generate: prompt " + std::to_string(i + 1) + " has no tokens");
    longest = std::max(longest, static_cast<std::int64_t>(ids[i].size()));
  }
  const bool any_lengths = model::batches_any_lengths(*loaded.model, options, longest, context);
  std::string lines;
  for (const std::vector<std::size_t>& group : batches(ids, any_lengths, batch, rank, world)) {
    std::vector<std::vector<std::int32_t>> inputs;
    std::vector<std::uint64_t> streams;
    for (const std::size_t i : group) {
      inputs.push_back(ids[i]);
      streams.push_back(i);
    }
    const Timer timer;
    const std::vector<model::Continuation> out =
        model::generate(*loaded.model, inputs, options, streams, context, device);
    const double seconds = timer.elapsed_s();
    for (std::size_t k = 0; k < group.size(); ++k) {
      lines += result_line(group[k], prompts[group[k]], out[k], *loaded.tokenizer, seconds);
    }
  }
  return lines;
}

// Every rank's lines in prompt order, without the index.
std::string in_prompt_order(const std::vector<std::string>& per_rank) {
  std::vector<json> records;
  for (const std::string& lines : per_rank) {
    std::istringstream in(lines);
    for (std::string line; std::getline(in, line);) records.push_back(json::parse(line));
  }
  std::sort(records.begin(), records.end(),
            [](const json& a, const json& b) { return a["index"].get<size_t>() < b["index"].get<size_t>(); });
  std::string out;
  for (json& r : records) {
    r.erase("index");
    out += r.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  }
  return out;
}

void write_output(const config::ParsedArgs& parsed, const std::string& text) {
  if (!parsed.has("out")) {
    std::cout << text << std::flush;
    return;
  }
  const std::string out = parsed.flags.at("out");
  const std::string temp = out + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream file(temp);
    file << text;
    if (!file) throw Error("generate: cannot write " + temp + " (check --out and free space)", ExitCode::kUsage);
  }
  sys::publish_atomically(temp, out);
}

}  // namespace

int run_generate(const Args& args) {
  const std::vector<config::Flag> flags{
      {"checkpoint", true, ""}, {"weights", true, ""},        {"prompt", true, ""},      {"prompts", true, ""},
      {"max-new-tokens", true, ""}, {"temperature", true, ""}, {"top-k", true, ""},       {"top-p", true, ""},
      {"seed", true, ""},       {"tokenizer", true, ""},      {"no-kv-cache", false, ""}, {"out", true, ""},
      {"batch-size", true, ""}, {"ignore-eos", false, ""}};
  if (wants_help(args)) {
    std::cout << kGenerateUsage;
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, /*with_options=*/true, false);
  model::SamplingOptions options = sampling_options(parsed);
  const std::vector<std::string> prompts = read_prompts(parsed);
  const std::int64_t batch = int_flag(parsed, "generate", "batch-size", "1");
  if (batch < 1) throw ConfigError("generate: --batch-size must be at least 1");
  tune_allocators();
  init_early_logging(parsed.config.log);
  Loaded loaded = load_model(parsed);
  apply_generation_defaults(options, parsed, loaded.config.model);
  const bool use_cuda = runtime::resolve_use_cuda(loaded.config.dist.device, runtime::visible_gpus());
  RankStart start = config_start(loaded.config, use_cuda);
  start.backend.reset();  // no gradients: the control plane gathers the results
  const Ranks ranks = start_ranks(start);
  loaded.model->module().to(ranks.device);
  loaded.model->module().eval();
  const int rank = ranks.bootstrap->world_rank();
  const std::string lines =
      continue_prompts(loaded, prompts, options, batch, rank, ranks.bootstrap->world_size(), ranks.device);
  const std::vector<std::string> gathered = ranks.bootstrap->allgather_string(lines);
  if (rank == 0) write_output(parsed, in_prompt_order(gathered));
  log::shutdown();
  return 0;
}

}  // namespace hpctrain::cli
