// `hpctrain sample`: images from a diffusion checkpoint (model.name=unet), as PNG files and one grid.
// Under mpirun the images are shared out among the ranks in contiguous ranges; image i draws its
// noise from (--seed, i) alone, so the set is the same at any rank count. Each rank writes its
// own images; rank 0 gathers the pixels and writes the grid (and with --dataset, the images as a
// dataset a classifier can be evaluated on).
#include <torch/nn/module.h>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <numeric>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/data/manifest.h"
#include "hpctrain/data/shard_writer.h"
#include "hpctrain/io/png_file.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/launch/commands.h"
#include "hpctrain/model/diffusion_sampler.h"
#include "hpctrain/runtime/device.h"

namespace hpctrain::cli {
namespace {

const char* kSampleUsage =
    "usage: [mpirun -np N] hpctrain sample --checkpoint FILE --out DIR\n"
    "           [--count N [--class K] | --per-class M] [--sampler ddim|ddpm] [--steps S]\n"
    "           [--guidance G] [--seed S] [--batch-size B] [--data DIR] [--dataset]\n\n"
    "Images from a diffusion checkpoint (train.objective=diffusion, model.name=unet; its moving\n"
    "average of the weights when it keeps one), written as DIR/sample-NNNNN[-class-K].png and\n"
    "DIR/grid.png:\n"
    "  --count N        images (default 16), of class --class K, or of no class without it\n"
    "  --per-class M    M images of every class instead (one grid row per class)\n"
    "  --sampler        ddim (deterministic, eta 0; default) or ddpm (ancestral)\n"
    "  --steps S        denoising steps, spaced evenly over diffusion.steps (default 50)\n"
    "  --guidance G     classifier-free guidance: noise = uncond + G (cond - uncond); 1 (default):\n"
    "                   the class alone; 0: unconditional\n"
    "  --seed S         image i is the same for the same seed at any rank count (default 0)\n"
    "  --batch-size B   images denoised together (default 64)\n"
    "  --data DIR       the dataset whose normalization and classes to use (default the\n"
    "                   checkpoint's data.path)\n"
    "  --dataset        also write the images, labelled with the classes asked for, as the split\n"
    "                   'samples' of a dataset DIR/dataset (uint8 images only), which `hpctrain\n"
    "                   eval --checkpoint CLASSIFIER --data.path=DIR/dataset\n"
    "                   --data.eval_split=samples` scores\n";

struct Request {
  std::vector<std::int64_t> labels;  // one per image; -1: no class
  std::int64_t columns = 0;          // of the grid
};

double guidance_flag(const config::ParsedArgs& parsed) {
  if (!parsed.has("guidance")) return 1.0;
  const std::string& text = parsed.flags.at("guidance");
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value >= 0 && value <= 100)) {
    throw ConfigError("sample: --guidance must be a number in [0, 100], not '" + text + "'");
  }
  return value;
}

model::DiffusionSampling diffusion_sampling(const config::ParsedArgs& parsed, const config::Config& config) {
  model::DiffusionSampling o;
  const std::string sampler = parsed.has("sampler") ? parsed.flags.at("sampler") : "ddim";
  if (sampler != "ddim" && sampler != "ddpm") throw ConfigError("sample: --sampler is ddim or ddpm, not '" + sampler + "'");
  o.sampler = sampler == "ddpm" ? model::DiffusionSampler::kDdpm : model::DiffusionSampler::kDdim;
  o.steps = int_flag(parsed, "sample", "steps", "50");
  if (o.steps < 1 || o.steps > config.diffusion.steps) {
    throw ConfigError("sample: --steps must be in [1, " + std::to_string(config.diffusion.steps) +
                      "] (the checkpoint's diffusion.steps)");
  }
  o.guidance = guidance_flag(parsed);
  o.seed = static_cast<std::uint64_t>(int_flag(parsed, "sample", "seed", "0"));
  return o;
}

Request sample_request(const config::ParsedArgs& parsed, std::int64_t classes, bool conditional) {
  Request r;
  if (parsed.has("per-class")) {
    if (parsed.has("count") || parsed.has("class")) throw ConfigError("sample: --per-class M replaces --count and --class");
    if (!conditional) throw ConfigError("sample: --per-class needs a class-conditional model (model.unet_class_cond)");
    const std::int64_t each = int_flag(parsed, "sample", "per-class", "1");
    if (each < 1 || each * classes > 100000) throw ConfigError("sample: --per-class must be in [1, 100000 / classes]");
    for (std::int64_t k = 0; k < classes; ++k) r.labels.insert(r.labels.end(), static_cast<std::size_t>(each), k);
    r.columns = each;
    return r;
  }
  const std::int64_t count = int_flag(parsed, "sample", "count", "16");
  if (count < 1 || count > 100000) throw ConfigError("sample: --count must be in [1, 100000]");
  std::int64_t label = -1;
  if (parsed.has("class")) {
    label = int_flag(parsed, "sample", "class", "0");
    if (!conditional) throw ConfigError("sample: --class needs a class-conditional model (model.unet_class_cond)");
    if (label >= classes) {
      throw ConfigError("sample: --class " + std::to_string(label) + " is not one of the dataset's " +
                        std::to_string(classes) + " classes (0 to " + std::to_string(classes - 1) + ")");
    }
  }
  r.labels.assign(static_cast<std::size_t>(count), label);
  r.columns = static_cast<std::int64_t>(std::ceil(std::sqrt(static_cast<double>(count))));
  return r;
}

// Images [B, C, H, W] in normalized units as bytes [B, H, W, C].
std::vector<std::uint8_t> to_pixels(const at::Tensor& images, const data::Manifest& manifest) {
  const at::Tensor pixels = (images.to(at::kCPU) * manifest.input_std + manifest.input_mean)
                                .clamp(0, 1)
                                .mul(255)
                                .round()
                                .to(at::kByte)
                                .permute({0, 2, 3, 1})
                                .contiguous();
  const auto* begin = pixels.data_ptr<std::uint8_t>();
  return {begin, begin + pixels.numel()};
}

std::string image_name(std::int64_t index, std::int64_t label) {
  return label < 0 ? fmt::format("sample-{:05d}.png", index) : fmt::format("sample-{:05d}-class-{}.png", index, label);
}

// The grid of every image, `columns` wide, 2 black pixels between them.
void write_grid(const std::string& path, const std::string& pixels, std::int64_t count, std::int64_t columns,
                const std::vector<std::int64_t>& shape) {
  constexpr std::int64_t kGap = 2;
  const std::int64_t channels = shape[0];
  const std::int64_t height = shape[1];
  const std::int64_t width = shape[2];
  const std::int64_t rows = (count + columns - 1) / columns;
  const std::int64_t grid_width = columns * (width + kGap) - kGap;
  const std::int64_t grid_height = rows * (height + kGap) - kGap;
  std::vector<std::uint8_t> grid(static_cast<std::size_t>(grid_width * grid_height * channels), 0);
  const std::int64_t image_bytes = height * width * channels;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t top = (i / columns) * (height + kGap);
    const std::int64_t left = (i % columns) * (width + kGap);
    for (std::int64_t y = 0; y < height; ++y) {
      const auto* from = reinterpret_cast<const std::uint8_t*>(pixels.data()) + i * image_bytes + y * width * channels;
      std::copy(from, from + width * channels, grid.begin() + ((top + y) * grid_width + left) * channels);
    }
  }
  io::write_png(path, grid, grid_width, grid_height, channels);
}

// The mean and standard deviation of the images' pixels, in [0, 1].
std::pair<double, double> pixel_statistics(const std::string& pixels) {
  double sum = 0;
  double squares = 0;
  for (const char byte : pixels) {
    const double value = static_cast<unsigned char>(byte) / 255.0;
    sum += value;
    squares += value * value;
  }
  const auto count = static_cast<double>(std::max<std::size_t>(1, pixels.size()));
  const double mean = sum / count;
  return {mean, std::sqrt(std::max(0.0, squares / count - mean * mean))};
}

// The images as split "samples" of a dataset at `dir`, with the normalization and fields of
// `source` (so a classifier trained on it reads them as it read its data), each labelled with the
// class it was asked for.
void write_dataset(const std::string& dir, const std::string& pixels, const std::vector<std::int64_t>& labels,
                   const data::Manifest& source) {
  data::Manifest manifest = source;
  manifest.name = source.name + " samples";
  manifest.splits.clear();
  const std::string temp = dir + ".tmp-" + std::to_string(::getpid());
  std::filesystem::create_directories(temp);
  manifest.splits["samples"] =
      data::write_split(temp, "samples", manifest.fields, {pixels.data(), labels.data()},
                        static_cast<std::int64_t>(labels.size()), data::ShardingOptions{});
  manifest.save(temp);
  if (std::filesystem::exists(dir)) sys::remove_tree(dir);
  sys::publish_atomically(temp, dir);
}

// --dataset needs labels and images stored as sample writes them: uint8 pixels, int64 labels.
void check_dataset_request(const data::Manifest& manifest, const std::vector<std::int64_t>& labels) {
  if (labels.front() < 0) throw ConfigError("sample: --dataset labels images with their class: give --class or --per-class");
  const bool stored_as_written = manifest.fields.size() == 2 && manifest.fields[0].dtype == io::DType::kUInt8 &&
                                 manifest.fields[1].dtype == io::DType::kInt64 && manifest.fields[1].shape.empty();
  if (!stored_as_written) {
    throw ConfigError("sample: --dataset writes uint8 images with int64 labels, and dataset '" + manifest.name +
                      "' stores its samples otherwise");
  }
}

// What to sample, checked before MPI starts.
struct Sampling {
  config::Config config;    // the checkpoint's
  data::Manifest manifest;  // its data's (or --data's): shape, classes, normalization
  Request wanted;
  model::DiffusionSampling options;
  std::int64_t batch = 64;
  std::string out;
};

Sampling read_sampling(const config::ParsedArgs& parsed, const ckpt::CheckpointReader& reader) {
  Sampling s;
  s.config = checkpoint_config(reader);
  init_early_logging(s.config.log);
  if (s.config.train.objective != config::Objective::kDiffusion) {
    throw ConfigError("sample: " + reader.path() + " was trained with train.objective=" +
                      config::name_of(s.config.train.objective) + "; sample draws images from a diffusion model");
  }
  s.manifest = data::Manifest::load(parsed.has("data") ? parsed.flags.at("data") : s.config.data.path);
  s.wanted = sample_request(parsed, s.manifest.num_classes, s.config.model.unet_class_cond);
  if (parsed.has("dataset")) check_dataset_request(s.manifest, s.wanted.labels);
  s.options = diffusion_sampling(parsed, s.config);
  s.options.low = (0 - s.manifest.input_mean) / s.manifest.input_std;  // pixel 0 and 1, normalized
  s.options.high = (1 - s.manifest.input_mean) / s.manifest.input_std;
  s.batch = int_flag(parsed, "sample", "batch-size", "64");
  if (s.batch < 1) throw ConfigError("sample: --batch-size must be at least 1");
  s.out = parsed.flags.at("out");
  return s;
}

// Images [first, last) in batches, each written as a PNG; their pixels, in order.
std::string sample_share(model::Model& model, const Sampling& sampling, std::int64_t first, std::int64_t last,
                         c10::Device device) {
  const std::vector<std::int64_t>& shape = sampling.manifest.fields.front().shape;
  const model::NoiseSchedule schedule(sampling.config.diffusion.schedule, sampling.config.diffusion.steps);
  const std::int64_t image_bytes = shape[0] * shape[1] * shape[2];
  std::string pixels_so_far;
  for (std::int64_t begin = first; begin < last; begin += sampling.batch) {
    const std::int64_t end = std::min(last, begin + sampling.batch);
    std::vector<std::int64_t> images(static_cast<std::size_t>(end - begin));
    std::iota(images.begin(), images.end(), begin);
    const std::vector<std::int64_t> labels(sampling.wanted.labels.begin() + begin, sampling.wanted.labels.begin() + end);
    const std::vector<std::uint8_t> pixels = to_pixels(
        model::sample_images(model, schedule, sampling.options, shape, labels, images, device), sampling.manifest);
    for (std::size_t i = 0; i < images.size(); ++i) {
      const auto at = pixels.begin() + static_cast<std::ptrdiff_t>(i) * image_bytes;
      const std::vector<std::uint8_t> image(at, at + image_bytes);
      io::write_png(sampling.out + "/" + image_name(images[i], labels[i]), image, shape[2], shape[1], shape[0]);
    }
    pixels_so_far.append(reinterpret_cast<const char*>(pixels.data()), pixels.size());
  }
  return pixels_so_far;
}

}  // namespace

int run_sample(const Args& args) {
  const std::vector<config::Flag> flags{
      {"checkpoint", true, ""}, {"out", true, ""},      {"count", true, ""},     {"class", true, ""},
      {"per-class", true, ""},  {"sampler", true, ""},  {"steps", true, ""},     {"guidance", true, ""},
      {"seed", true, ""},       {"batch-size", true, ""}, {"data", true, ""},      {"dataset", false, ""}};
  if (wants_help(args)) {
    std::cout << kSampleUsage;
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, /*with_options=*/false, false);
  if (!parsed.has("checkpoint")) throw ConfigError("sample: --checkpoint FILE is required");
  if (!parsed.has("out")) throw ConfigError("sample: --out DIR is required");
  tune_allocators();
  const ckpt::CheckpointReader reader(parsed.flags.at("checkpoint"));
  const Sampling sampling = read_sampling(parsed, reader);
  const std::vector<std::int64_t>& shape = sampling.manifest.fields.front().shape;
  const std::shared_ptr<model::Model> model = checkpoint_model(
      reader, sampling.config, {shape, sampling.manifest.num_classes, false}, weights::Weights::kAverageIfKept);
  const bool use_cuda = runtime::resolve_use_cuda(sampling.config.dist.device, runtime::visible_gpus());
  RankStart start = config_start(sampling.config, use_cuda);
  start.backend.reset();  // no gradients: the control plane gathers the images
  const Ranks ranks = start_ranks(start);
  model->module().to(ranks.device);
  model->module().eval();
  std::error_code failed;
  std::filesystem::create_directories(sampling.out, failed);
  if (failed) throw ConfigError("sample: cannot create --out " + sampling.out + ": " + failed.message());

  const int rank = ranks.bootstrap->world_rank();
  const int world = ranks.bootstrap->world_size();
  const auto count = static_cast<std::int64_t>(sampling.wanted.labels.size());
  const Timer timer;
  const std::string mine = sample_share(*model, sampling, count * rank / world, count * (rank + 1) / world, ranks.device);
  double slowest = 0;
  for (const std::string& seconds : ranks.bootstrap->allgather_string(std::to_string(timer.elapsed_s()))) {
    slowest = std::max(slowest, std::stod(seconds));
  }
  const std::vector<std::string> gathered = ranks.bootstrap->allgather_string(mine);
  if (rank == 0) {
    std::string all;
    for (const std::string& part : gathered) all += part;
    write_grid(sampling.out + "/grid.png", all, count, sampling.wanted.columns, shape);
    if (parsed.has("dataset")) write_dataset(sampling.out + "/dataset", all, sampling.wanted.labels, sampling.manifest);
    log::info("sample: {} image(s) by {} on {} rank(s), {} steps, guidance {}: {:.2f} images/s; {}/grid.png", count,
              sampling.options.sampler == model::DiffusionSampler::kDdim ? "ddim" : "ddpm", world,
              sampling.options.steps, sampling.options.guidance, slowest > 0 ? static_cast<double>(count) / slowest : 0.0,
              sampling.out);
    const auto [mean, deviation] = pixel_statistics(all);
    log::info("sample: pixels in [0, 1] have mean {:.4f} and standard deviation {:.4f}; the dataset's: {:.4f} and {:.4f}",
              mean, deviation, sampling.manifest.input_mean, sampling.manifest.input_std);
  }
  log::shutdown();
  return 0;
}

}  // namespace hpctrain::cli
