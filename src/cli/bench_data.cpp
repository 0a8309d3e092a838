// `hpctrain bench data`: the loader alone against a raw sequential read of the same shard files.
#include <fcntl.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <numeric>
#include <tuple>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/data/distributed_sampler.h"
#include "hpctrain/data/loader.h"
#include "hpctrain/data/shard_writer.h"
#include "hpctrain/data/split.h"
#include "hpctrain/launch/commands.h"
#include "bench.h"
#include "hpctrain/launch/command_start.h"

namespace hpctrain::cli {
namespace {

const char* const kDataUsage =
    "usage: hpctrain bench data --data PATH [--split train] [--batch-size 64] [--repeats 3]\n"
    "                           [--prefetch 4] [--cache-mb 256] [--shuffle-window-mb N] [--cold]\n"
    "                           [--data-io mmap|posix]\n\n"
    "Reads the split with hpctrain's loader (data.prefetch=--prefetch) in sequential and in shuffled\n"
    "order, with 1 and with 2 reader threads (1T, 2T), in batches of --batch-size, and reads\n"
    "the same shard files raw with read(2), 4 MiB at a time. The loader's first pass in file\n"
    "order reads the split from the files (and fills the page cache and the loader's block\n"
    "cache) and is reported on its own, against the raw read timed before it; then, for each\n"
    "case, one untimed pass and --repeats timed passes, each with a raw read of its own (before\n"
    "and after it in turn), reported as medians (min-max MB/s: the slowest and the fastest\n"
    "pass): raw MB/s is the raw read timed in turn with the\n"
    "case, and % of raw compares the two (with --cold and mmap, the first raw read). MB/s counts\n"
    "the bytes of the input and label fields delivered (raw: file bytes); blocks/pass is how\n"
    "many of the split's blocks (one chunk each) were read from the files per pass.\n"
    "--shuffle-window-mb N shuffles by chunks, as data.shuffle_window_mb=N does (with a\n"
    "--cache-mb smaller than the split, this is the case it is for). --cold drops the shard\n"
    "files from the page cache (posix_fadvise DONTNEED) before every pass, raw reads included,\n"
    "so reads come from the device (pages the loader has mapped stay: with mmap only its first\n"
    "pass reads the device).\n"
    "--data-io acts as data.io does (default mmap: the shard files mapped, blocks read in place\n"
    "from the page cache, only their labels counted against --cache-mb; posix: blocks read\n"
    "through HDF5 into memory).\n"
    "The check compares the label sum of every pass with the one in file order, so a lost or\n"
    "repeated sample fails the run.\n\n"
    "usage: mpirun -np N hpctrain bench data --data PATH --io [--split train] [--repeats 3] [--cold]\n"
    "                                         [--cache-mb 256]\n\n"
    "Times reading the whole split into memory on every rank: each rank on its own (posix, as\n"
    "data.io=posix does over the first epoch) against all ranks together through MPI-IO (mpio,\n"
    "data.io=mpio: each rank reads 1/N and the shares are exchanged), in turn after one untimed\n"
    "read of each; median, min and max seconds of the slowest rank. --cold: every rank drops\n"
    "the shard files from its page cache before every read (on a network file system, the\n"
    "client's cache: its servers may still hold the files).\n";

// --cold: the kernel forgets the file's cached pages, so the next read goes to the device.
void drop_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(path + ": cannot open to drop it from the page cache");
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// The raw read's buffer is page-aligned, as dd's is: on some CPUs the kernel's copy into a
// buffer 16 bytes past a page boundary (where malloc puts a large block) runs at a fifth of the
// speed (1.4 against 8.6 GB/s on the development VM), which would flatter the loader's share.
struct RawReadBuffer {
  static constexpr size_t kBytes = 4 << 20;
  std::unique_ptr<char, decltype(&std::free)> data{static_cast<char*>(std::aligned_alloc(4096, kBytes)), &std::free};
};

std::int64_t read_file_raw(const std::string& path, const RawReadBuffer& buffer) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(path + ": cannot open for the raw read");
  std::int64_t total = 0;
  ssize_t n = 0;
  while ((n = ::read(fd, buffer.data.get(), RawReadBuffer::kBytes)) > 0) total += n;
  ::close(fd);
  return total;
}

// The flags both modes of bench data read, checked.
struct DataFlags {
  std::string dir;
  std::string split_name;
  std::int64_t cache_mb = 0;
  int repeats = 0;
  bool cold = false;
};

DataFlags data_flags(const config::ParsedArgs& parsed) {
  if (!parsed.has("data")) throw ConfigError("bench data: --data PATH is required");
  DataFlags f;
  f.dir = parsed.flags.at("data");
  f.split_name = text_flag(parsed, "split", "train");
  f.cache_mb = int_flag(parsed, "bench data", "cache-mb", "256");
  f.repeats = static_cast<int>(int_flag(parsed, "bench data", "repeats", "3"));
  f.cold = parsed.has("cold");
  if (f.repeats < 1) throw ConfigError("bench data: --repeats must be >= 1");
  if (f.cache_mb < 0 || f.cache_mb > (std::int64_t{1} << 30)) {
    throw ConfigError("bench data: --cache-mb must be between 0 and 2^30");
  }
  return f;
}

// The split's shard files, from the manifest: read once every flag has been checked.
std::vector<std::string> shard_files(const DataFlags& f) {
  std::vector<std::string> files;
  const data::Manifest manifest = data::Manifest::load(f.dir);
  for (const auto& shard : manifest.split(f.split_name).shards) {
    files.push_back((std::filesystem::path(f.dir) / shard.file).string());
  }
  return files;
}

// "a-b" MB/s of `bytes` over the slowest and the fastest of `time`.
std::string rate_range(double bytes, const Spread& time) {
  char text[48];
  std::snprintf(text, sizeof text, "%.1f-%.1f", bytes / time.max / 1e6, bytes / time.min / 1e6);
  return text;
}

}  // namespace

int bench_data(const config::ParsedArgs& parsed) {
  const DataFlags f = data_flags(parsed);
  const std::string& dir = f.dir;
  const std::string& split_name = f.split_name;
  const std::int64_t batch = int_flag(parsed, "bench data", "batch-size", "64");
  const int repeats = f.repeats;
  const std::int64_t cache_mb = f.cache_mb;
  const std::int64_t window_mb = int_flag(parsed, "bench data", "shuffle-window-mb", "0");
  const auto prefetch = static_cast<int>(int_flag(parsed, "bench data", "prefetch", "4"));
  const bool cold = f.cold;
  const std::string data_io = text_flag(parsed, "data-io", "mmap");
  config::DataIo io = config::DataIo::kMmap;
  if (!config::parse_choice(data_io, io) || io == config::DataIo::kMpio) {
    throw ConfigError("bench data: --data-io must be mmap or posix (mpio: --io), not '" + data_io + "'");
  }
  const data::ShardAccess access = data::shard_access(io);
  if (batch < 1 || prefetch < 1) throw ConfigError("bench data: --batch-size and --prefetch must be >= 1");
  if (window_mb < 0 || 2 * window_mb > cache_mb) {
    throw ConfigError("bench data: --shuffle-window-mb must be >= 0 and at most half of --cache-mb");
  }
  const std::vector<std::string> files = shard_files(f);
  const auto drop_cache = [&] {
    if (cold) for (const auto& file : files) drop_from_page_cache(file);
  };

  // The raw read first, the reference of the first pass: once the loader has mapped the files, the
  // kernel keeps their pages, and --cold could not drop them.
  const RawReadBuffer buffer;
  std::int64_t raw_bytes = 0;
  const BenchCase raw_read{"raw sequential read", [&] {
                             raw_bytes = 0;
                             for (const auto& file : files) raw_bytes += read_file_raw(file, buffer);
                           },
                           drop_cache};
  const Spread raw_s = spread_of(time_in_turn({raw_read}, {1, repeats})[0]);

  const data::Split split = data::Split::load(dir, split_name, cache_mb << 20, access);
  const data::Manifest& m = split.manifest();
  const std::int64_t n = split.size();
  const std::int64_t sample_bytes = data::row_bytes(m.fields.front()) + 8;  // input + int64 label

  data::SamplerOptions options;
  options.dataset_size = n;
  options.batch_size = batch;
  options.seed = 1;
  data::set_shuffle_window(m, split_name, window_mb, options);
  data::check_shuffle_window(split, options);
  const data::DistributedSampler sampler(options);
  const std::vector<std::int64_t> shuffled = sampler.global_order(0);

  // Each pass reads the split once through a Loader, as training does, summing the labels.
  const auto steps_of = [&](bool shuffle) {
    std::vector<std::vector<std::int64_t>> steps;
    for (std::int64_t first = 0; first < n; first += batch) {
      const std::int64_t count = std::min(batch, n - first);
      steps.emplace_back(count);
      for (std::int64_t k = 0; k < count; ++k) steps.back()[k] = shuffle ? shuffled[first + k] : first + k;
    }
    return steps;
  };
  const std::vector<std::vector<std::int64_t>> sequential_steps = steps_of(false);
  const std::vector<std::vector<std::int64_t>> shuffled_steps = steps_of(true);
  std::int64_t label_sum = 0;
  const auto pass = [&](const std::vector<std::vector<std::int64_t>>& steps, int threads) {
    data::Loader loader(split, steps, {prefetch, threads});
    label_sum = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      const data::Batch read = loader.next();  // summed in a plain loop: a torch op costs more than a row
      const std::int64_t* labels = read.target.data_ptr<std::int64_t>();
      label_sum = std::accumulate(labels, labels + read.target.numel(), label_sum);
    }
  };
  struct Case {
    std::string name;
    Spread seconds;
    Spread raw_seconds;  // the raw read it is compared with
    double blocks_per_pass;
  };
  std::vector<Case> cases;
  drop_cache();
  const Timer first_timer;
  pass(sequential_steps, 1);
  const double first_s = first_timer.elapsed_s();
  cases.push_back({"loader first pass", {first_s, first_s, first_s}, raw_s, static_cast<double>(split.blocks_read())});
  const std::int64_t sequential_sum = label_sum;
  bool check = true;
  // The VM's raw read has moved between 5 and 16 GB/s within an hour, so each case is timed in
  // turn with a raw read, pass by pass, and compared with it. Not with --cold and mapped files: a
  // raw read would find the pages the loader keeps mapped in the page cache.
  const bool raw_in_turn = !(cold && split.maps_files());
  const std::string shuffled_name = window_mb > 0 ? "loader by chunks" : "loader shuffled";
  for (const bool shuffle : {false, true}) {
    for (const int threads : {1, 2}) {
      const std::int64_t blocks_before = split.blocks_read();
      const std::string name =
          (shuffle ? shuffled_name : std::string("loader sequential")) + ", " + std::to_string(threads) + "T";
      const BenchCase loader_pass{name, [&] { pass(shuffle ? shuffled_steps : sequential_steps, threads); }, drop_cache};
      std::vector<BenchCase> timed{loader_pass};
      if (raw_in_turn) timed.insert(timed.begin(), raw_read);
      const auto seconds = time_in_turn(timed, {1, repeats});
      cases.push_back({name, spread_of(seconds.back()), raw_in_turn ? spread_of(seconds.front()) : raw_s,
                       static_cast<double>(split.blocks_read() - blocks_before) / (repeats + 1)});
      check = check && label_sum == sequential_sum;
    }
  }

  const auto raw_mbps = [&](const Spread& seconds) { return raw_bytes / seconds.median / 1e6; };
  std::printf("# bench data: %s split %s, %lld samples of %lld bytes, batch %lld, prefetch %d,\n"
              "# 1 or 2 reader threads (1T, 2T); %s%s; %s;\n"
              "# median of %d timed passes after 1 untimed pass, %s; MB/s = delivered bytes / time;\n"
              "# min-max: MB/s of the slowest and the fastest pass\n",
              dir.c_str(), split_name.c_str(), static_cast<long long>(n),
              static_cast<long long>(sample_bytes), static_cast<long long>(batch), prefetch,
              split.maps_files()                 ? "shard files mapped (data.io=mmap), "
              : split.why_not_mapped().empty() ? "files read (data.io=posix), "
                                               : "files read (data.io=mmap does not apply), ",
              split.caches_blocks()
                  ? "split held in memory after its first read"
                  : ("split larger than --cache-mb: " + std::to_string(split.blocks_held_at_most()) +
                     " blocks held").c_str(),
              cold ? "page cache dropped before every pass (--cold)" : "page cache as it is", repeats,
              raw_in_turn ? "each timed in turn with a raw read" : "against the first raw read");
  if (!split.why_not_mapped().empty()) {
    std::printf("# data.io=mmap does not apply: %s\n", split.why_not_mapped().c_str());
  }
  std::printf("%-24s %12s %10s %10s %10s %12s %s\n", "case", "samples/s", "MB/s", "raw MB/s", "% of raw", "blocks/pass",
              "min-max MB/s");
  std::printf("%-24s %12s %10.1f %10.1f %10s %12s %s\n", "raw sequential read", "-", raw_mbps(raw_s), raw_mbps(raw_s),
              "100.0", "-", rate_range(static_cast<double>(raw_bytes), raw_s).c_str());
  for (const Case& c : cases) {
    const double delivered = static_cast<double>(n * sample_bytes);
    const double mbps = delivered / c.seconds.median / 1e6;
    std::printf("%-24s %12.0f %10.1f %10.1f %10.1f %12.1f %s\n", c.name.c_str(), n / c.seconds.median, mbps,
                raw_mbps(c.raw_seconds), 100.0 * mbps / raw_mbps(c.raw_seconds), c.blocks_per_pass,
                rate_range(delivered, c.seconds).c_str());
  }
  std::printf("check: %s (label sum of every timed pass against %lld in file order)\n",
              check ? "OK" : "FAILED", static_cast<long long>(sequential_sum));
  if (!check) throw DataError("bench data: a pass did not see every sample exactly once");
  return 0;
}

// --io: the time to read the whole split into memory on every rank, each rank on its own (posix)
// against all ranks together through MPI-IO (mpio), in turn, --repeats times each after one
// untimed read of each; --cold: every rank drops the files from its page cache before every read.
int bench_data_io(const config::ParsedArgs& parsed) {
  const DataFlags f = data_flags(parsed);
  const std::vector<std::string> files = shard_files(f);
  RankStart start = bench_start(/*use_cuda=*/false, std::nullopt);
  start.bind_device = false;  // the host reads; no device takes part
  const Ranks ranks = start_ranks(start);
  const auto& bootstrap = ranks.bootstrap;
  std::optional<data::Split> split;
  std::int64_t split_bytes = 0;
  const auto fresh_split = [&] {  // untimed: a split whose blocks are not read yet
    split.reset();
    split.emplace(data::Split::load(f.dir, f.split_name, f.cache_mb << 20, data::ShardAccess::kRead));
    if (!split->caches_blocks()) {
      throw ConfigError("bench data --io: split '" + f.split_name + "' does not fit in --cache-mb " +
                        std::to_string(f.cache_mb) + "; raise it");
    }
    split_bytes = split->size() * (data::row_bytes(split->manifest().fields.front()) + 8);
    if (f.cold) for (const auto& file : files) drop_from_page_cache(file);  // its node's client cache
    bootstrap->barrier();
  };
  const auto seconds = time_in_turn({{"posix", [&] { split->preload(); }, fresh_split},
                                     {"mpio", [&] { split->preload_collective(); }, fresh_split}},
                                    {1, f.repeats});
  const Spread posix_s = slowest_spread(*bootstrap, seconds[0]);
  const Spread mpio_s = slowest_spread(*bootstrap, seconds[1]);
  if (bootstrap->world_rank() == 0) {
    const int n = bootstrap->world_size();
    std::printf("# bench data --io: %s split %s (%.1f MB) read whole into memory on each of %d rank(s),\n"
                "# posix and mpio in turn, %d times each after 1 untimed read of each; %s;\n"
                "# seconds of the slowest rank; file MB/s = bytes the file system served / median time (posix:\n"
                "# every node reads it all, its ranks sharing the node's page cache; mpio: each byte once)\n",
                f.dir.c_str(), f.split_name.c_str(), split_bytes / 1e6, n, f.repeats,
                f.cold ? "page cache dropped before every read (--cold)" : "page cache as it is");
    std::printf("%-8s %10s %10s %10s %12s\n", "io", "median s", "min s", "max s", "file MB/s");
    for (const auto& [name, time, reads] :
         {std::tuple<const char*, Spread, int>{"posix", posix_s, bootstrap->topology().node_count},
          {"mpio", mpio_s, 1}}) {
      std::printf("%-8s %10.4f %10.4f %10.4f %12.1f\n", name, time.median, time.min, time.max,
                  reads * split_bytes / time.median / 1e6);
    }
  }
  return 0;
}

const char* bench_data_usage() { return kDataUsage; }

}  // namespace hpctrain::cli
