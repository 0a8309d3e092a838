// `hpctrain data inspect|order`: look inside a dataset, and answer "which samples did rank R train
// on in epoch E?". Single process; no MPI.
#include <iomanip>
#include <sstream>
#include <iostream>

#include "hpctrain/config/option_table.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/data/dataset_check.h"
#include "hpctrain/data/distributed_sampler.h"
#include "hpctrain/data/manifest.h"
#include "hpctrain/data/split.h"
#include "hpctrain/data/token_stream.h"
#include "hpctrain/data/token_windows.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/launch/commands.h"

namespace hpctrain::cli {
namespace {

const char* kDataUsage =
    "usage: hpctrain data inspect PATH [--verify]\n"
    "       hpctrain data order --data PATH [--split train] --world-size W --rank R --epoch E\n"
    "                           [--seed S] [--from-cursor C] [--limit K] [--batch-size B]\n"
    "                           [--drop-last] [--no-shuffle] [--shuffle-window-mb N]\n"
    "                           [--block-size T]\n\n"
    "inspect: the manifest, schema and sample counts per split and shard; --verify also reads\n"
    "         every chunk (checking its checksum) and names the first bad shard and field.\n"
    "order:   the dataset indices rank R trains on in epoch E (1-based, as the logs count), one\n"
    "         per line, in order, from the epoch's global cursor C (0: the start). --seed,\n"
    "         --batch-size, --drop-last, --no-shuffle and --shuffle-window-mb must match the\n"
    "         run's train.seed, train.batch_size, train.drop_last, train.shuffle and\n"
    "         data.shuffle_window_mb (defaults: their defaults);\n"
    "         the batch size matters only with --drop-last. For a token stream (prepare text),\n"
    "         the offsets of the windows of --block-size + 1 tokens rank R trains on, drawn\n"
    "         from (seed, epoch, window position); C counts windows.\n";

std::string table_default(const char* option) { return *config::find_option(option)->default_text; }

int inspect(const config::ParsedArgs& parsed) {
  if (parsed.positionals.size() != 2) throw ConfigError("data inspect: give one dataset PATH");
  const std::string& path = parsed.positionals[1];
  const data::Manifest m = data::Manifest::load(path);
  std::cout << "dataset " << path << " (" << m.name << "), format version " << m.version << "\n"
            << "schema:\n";
  for (const auto& f : m.fields) {
    std::cout << "  " << std::left << std::setw(8) << f.name << io::dtype_name(f.dtype)
              << io::shape_text(f.shape) << "\n";
  }
  std::cout << "classes " << m.num_classes << ", inputs normalized with mean " << m.input_mean
            << ", std " << m.input_std << "\n";
  for (const auto& [name, split] : m.splits) {
    std::cout << "split " << name << ": " << split.samples() << " samples in " << split.shards.size()
              << " shard(s)\n";
    for (const auto& shard : split.shards) {
      std::cout << "  " << std::left << std::setw(24) << shard.file << shard.samples << "\n";
    }
  }
  const Timer timer;
  const data::CheckReport report =
      parsed.has("verify") ? data::verify_contents(path, m) : data::check_structure(path, m);
  if (parsed.has("verify")) {
    std::cout << "verify: all " << report.shards << " shard(s) OK, " << std::fixed
              << std::setprecision(1) << report.bytes_read / 1e6 << " MB read and checksummed in "
              << std::setprecision(2) << timer.elapsed_s() << " s\n";
  } else {
    std::cout << "structure: all " << report.shards << " shard(s) match the manifest "
              << "(--verify reads every chunk)\n";
  }
  return 0;
}

void print_first(const std::vector<std::int64_t>& values, std::int64_t limit) {
  const size_t count = limit > 0 ? std::min(values.size(), static_cast<size_t>(limit)) : values.size();
  std::ostringstream out;
  for (size_t i = 0; i < count; ++i) out << values[i] << "\n";
  std::cout << out.str();
}

// `data order` on a token stream: window offsets instead of sample indices.
int window_order(const config::ParsedArgs& parsed, const data::SplitSpec& split, std::int64_t epoch,
                 std::int64_t cursor, const data::SamplerOptions& samples) {
  if (!parsed.has("block-size")) {
    throw ConfigError("data order: the split is a token stream; --block-size is required (the "
                      "tokens a model sees per window)");
  }
  if (parsed.has("drop-last") || parsed.has("no-shuffle") || parsed.has("shuffle-window-mb")) {
    throw ConfigError("data order: --drop-last, --no-shuffle and --shuffle-window-mb apply to sample "
                      "splits; a token stream's windows are always drawn at random");
  }
  data::TokenWindowOptions options;
  options.stream_tokens = split.samples();
  options.block_size = int_flag(parsed, "data", "block-size", "");
  options.world_size = samples.world_size;
  options.rank = samples.rank;
  options.batch_size = samples.batch_size;
  options.seed = samples.seed;
  if (options.block_size < 1) throw ConfigError("data order: --block-size must be >= 1");
  const data::TokenWindowSampler sampler(options);
  if (cursor > sampler.windows_per_epoch()) {
    throw ConfigError("data order: --from-cursor " + std::to_string(cursor) + " is past the epoch's " +
                      std::to_string(sampler.windows_per_epoch()) + " windows");
  }
  print_first(sampler.rank_offsets(epoch - 1, cursor), int_flag(parsed, "data", "limit", "0"));
  return 0;
}

int order(const config::ParsedArgs& parsed) {
  for (const char* required : {"data", "world-size", "rank", "epoch"}) {
    if (!parsed.has(required)) throw ConfigError(std::string("data order: --") + required + " is required");
  }
  const data::Manifest m = data::Manifest::load(parsed.flags.at("data"));
  const std::string split = parsed.has("split") ? parsed.flags.at("split") : "train";
  data::SamplerOptions options;
  options.dataset_size = m.split(split).samples();
  options.world_size = static_cast<int>(int_flag(parsed, "data", "world-size", ""));
  options.rank = static_cast<int>(int_flag(parsed, "data", "rank", ""));
  options.batch_size = int_flag(parsed, "data", "batch-size", table_default("train.batch_size"));
  options.seed = static_cast<std::uint64_t>(int_flag(parsed, "data", "seed", table_default("train.seed")));
  options.shuffle = !parsed.has("no-shuffle");
  options.drop_last = parsed.has("drop-last");
  const std::int64_t window_mb = int_flag(parsed, "data", "shuffle-window-mb", "0");
  if (window_mb < 0 || window_mb > (std::int64_t{1} << 29)) {
    throw ConfigError("data order: --shuffle-window-mb must be in [0, 2^29], as data.shuffle_window_mb");
  }
  data::set_shuffle_window(m, split, window_mb, options);
  const std::int64_t epoch = int_flag(parsed, "data", "epoch", "");
  if (options.world_size < 1 || options.rank >= options.world_size) {
    throw ConfigError("data order: need --world-size >= 1 and 0 <= --rank < world size");
  }
  if (epoch < 1) throw ConfigError("data order: --epoch counts from 1, as the training log does");
  if (options.batch_size < 1) throw ConfigError("data order: --batch-size must be >= 1");
  const std::int64_t cursor = int_flag(parsed, "data", "from-cursor", "0");
  if (cursor < 0) throw ConfigError("data order: --from-cursor must be >= 0");
  if (data::is_token_stream(m)) return window_order(parsed, m.split(split), epoch, cursor, options);
  if (parsed.has("block-size")) {
    throw ConfigError("data order: --block-size applies to token streams; split '" + split +
                      "' holds samples");
  }
  if (cursor > options.dataset_size) {
    throw ConfigError("data order: --from-cursor " + std::to_string(cursor) + " is past the split's " +
                      std::to_string(options.dataset_size) + " samples");
  }
  const data::DistributedSampler sampler(options);
  print_first(sampler.rank_indices(sampler.global_order(epoch - 1), cursor),
              int_flag(parsed, "data", "limit", "0"));
  return 0;
}

}  // namespace

int run_data(const Args& args) {
  const std::vector<config::Flag> flags{
      {"verify", false, ""},      {"data", true, ""},        {"split", true, ""},
      {"world-size", true, ""},   {"rank", true, ""},        {"epoch", true, ""},
      {"seed", true, ""},         {"from-cursor", true, ""}, {"limit", true, ""},
      {"batch-size", true, ""},   {"drop-last", false, ""},  {"no-shuffle", false, ""},
      {"block-size", true, ""},   {"shuffle-window-mb", true, ""},
  };
  if (wants_help(args)) {
    std::cout << kDataUsage;
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, /*with_options=*/false, false);
  const std::string action = parsed.positionals.empty() ? "" : parsed.positionals.front();
  if (action == "inspect") return inspect(parsed);
  if (action == "order") return order(parsed);
  throw ConfigError("data: expected 'inspect' or 'order' (see hpctrain data --help)");
}

}  // namespace hpctrain::cli
