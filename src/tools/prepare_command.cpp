// `hpctrain prepare <format>`: import a dataset into hpctrain's HDF5 format. Runs as one process.
#include <iostream>

#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/units.h"
#include "hpctrain/data/importers.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/launch/commands.h"

namespace hpctrain::cli {
int run_prepare(const Args& args) {
  const std::vector<config::Flag> flags{
      {"source", true, "directory holding the raw files"},
      {"out", true, "dataset directory to create"},
      {"overwrite", false, "replace an existing output directory"},
      {"limit", true, "keep only the first N samples of each split (0: all)"},
      {"test-fraction", true, "held-out fraction for npy without X_test.npy and for text"},
      {"shards", true, "shards per split"},
      {"shard-size", true, "target shard size, e.g. 256MiB (instead of --shards)"},
      {"compression", true, "none, deflate or deflate:1..9"},
      {"tokenizer", true, "text: bytes (default), gpt2, or a tokenizer.json or the model directory holding it"},
      {"vocab", true, "text with --tokenizer gpt2: GPT-2's encoder.json"},
      {"merges", true, "text with --tokenizer gpt2: GPT-2's vocab.bpe"},
  };
  std::string formats;
  for (const auto& name : data::importer_names()) formats += (formats.empty() ? "" : "|") + name;
  if (wants_help(args)) {
    std::cout << "usage: hpctrain prepare <" << formats << "> --source DIR --out DIR "
              << "[--overwrite] [--limit N]\n"
                 "       [--shards N | --shard-size SIZE] [--compression none|deflate[:L]]\n\n"
                 "       [--test-fraction F] [--tokenizer bytes|gpt2 --vocab encoder.json --merges vocab.bpe]\n"
                 "       [--tokenizer TOKENIZER_JSON|MODEL_DIR]\n\n"
                 "Imports a dataset into a directory of manifest.json plus HDF5 shards per split,\n"
                 "chunked with fletcher32 checksums:\n"
                 "  fashion-mnist, mnist  IDX files (gzipped or not) -> splits train, test\n"
                 "  npy                   X.npy + y.npy (+ X_test.npy + y_test.npy, else the last\n"
                 "                        --test-fraction, default 0.1) -> train, test\n"
                 "  text                  a file or directory of text -> tokens, train + val: bytes\n"
                 "                        (vocabulary 256), GPT-2's BPE with --tokenizer gpt2 and its\n"
                 "                        two files, or a Hugging Face tokenizer.json's (special tokens'\n"
                 "                        strings in the text kept as plain text), whose files the\n"
                 "                        dataset keeps (docs/fine-tuning.md)\n"
                 "The output appears only when complete; an existing one is kept unless --overwrite.\n"
                 "Example:\n"
                 "  hpctrain prepare fashion-mnist --source /usr/share/datasets/fashion-mnist "
                 "--out data/fashion-mnist\n";
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, /*with_options=*/false, false);
  if (parsed.positionals.size() != 1) {
    throw ConfigError("prepare: name one dataset format (" + formats + "); see hpctrain prepare --help");
  }
  if (!parsed.config_file.empty()) throw ConfigError("prepare: --config is not used by prepare");
  data::ImportOptions options;
  options.source = parsed.has("source") ? parsed.flags.at("source") : "";
  options.out = parsed.has("out") ? parsed.flags.at("out") : "";
  options.overwrite = parsed.has("overwrite");
  options.limit = int_flag(parsed, "prepare", "limit", "0");
  if (parsed.has("test-fraction")) {
    char* end = nullptr;
    const std::string& text = parsed.flags.at("test-fraction");
    options.test_fraction = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0') throw ConfigError("prepare: --test-fraction must be a number in (0, 1)");
  }
  if (parsed.has("shards") && parsed.has("shard-size")) {
    throw ConfigError("prepare: give --shards or --shard-size, not both");
  }
  options.sharding.shards = int_flag(parsed, "prepare", "shards", "0");
  if (parsed.has("shards") && options.sharding.shards < 1) throw ConfigError("prepare: --shards must be >= 1");
  if (parsed.has("shard-size")) options.sharding.shard_bytes = parse_bytes(parsed.flags.at("shard-size"), "--shard-size");
  options.sharding.deflate_level =
      data::parse_compression(parsed.has("compression") ? parsed.flags.at("compression") : "none");
  if (options.source.empty()) throw ConfigError("prepare: --source DIR is required");
  if (parsed.positionals.front() != "text" && (parsed.has("tokenizer") || parsed.has("vocab") || parsed.has("merges"))) {
    throw ConfigError("prepare: --tokenizer, --vocab and --merges apply to text only");
  }
  options.tokenizer = parsed.has("tokenizer") ? parsed.flags.at("tokenizer") : "bytes";
  options.vocab = parsed.has("vocab") ? parsed.flags.at("vocab") : "";
  options.merges = parsed.has("merges") ? parsed.flags.at("merges") : "";
  log::init_console({}, false, spdlog::level::info);
  data::import_dataset(parsed.positionals.front(), options);
  return 0;
}

int run_docs(const Args& args) {
  if (args.size() != 1 || args[0] != "options") {
    throw ConfigError("docs: usage: hpctrain docs options   (prints docs/configuration.md)");
  }
  std::cout << config::options_markdown();
  return 0;
}

}  // namespace hpctrain::cli
