// `hpctrain sample`: images from a diffusion checkpoint (model.name=unet), as PNG files and one grid.
// Under mpirun the images are shared out among the ranks in contiguous ranges; image i draws its
// noise from (--seed, i) alone, so the set is the same at any rank count. Each rank writes its
// own images; rank 0 gathers the pixels and writes the grid.
#include <torch/nn/module.h>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <numeric>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/cli/commands.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/data/manifest.h"
#include "hpctrain/io/png_file.h"
#include "hpctrain/model/diffusion_sampler.h"
#include "hpctrain/train/device.h"
#include "runtime.h"

namespace hpctrain::cli {
namespace {

const char* kSampleUsage =
    "usage: [mpirun -np N] hpctrain sample --checkpoint FILE --out DIR\n"
    "           [--count N [--class K] | --per-class M] [--sampler ddim|ddpm] [--steps S]\n"
    "           [--guidance G] [--seed S] [--batch-size B] [--data DIR]\n\n"
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
    "                   checkpoint's data.path)\n";

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

}  // namespace

int run_sample(const Args& args) {
  const std::vector<config::Flag> flags{
      {"checkpoint", true, ""}, {"out", true, ""},      {"count", true, ""},     {"class", true, ""},
      {"per-class", true, ""},  {"sampler", true, ""},  {"steps", true, ""},     {"guidance", true, ""},
      {"seed", true, ""},       {"batch-size", true, ""}, {"data", true, ""}};
  if (wants_help(args)) {
    std::cout << kSampleUsage;
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, /*with_options=*/false, false);
  if (!parsed.has("checkpoint")) throw ConfigError("sample: --checkpoint FILE is required");
  if (!parsed.has("out")) throw ConfigError("sample: --out DIR is required");
  sys::tune_allocator();
  const ckpt::CheckpointReader reader(parsed.flags.at("checkpoint"));
  const config::Config config = checkpoint_config(reader);
  init_early_logging(config.log);
  if (config.train.objective != config::Objective::kDiffusion) {
    throw ConfigError("sample: " + reader.path() + " was trained with train.objective=" +
                      config::name_of(config.train.objective) + "; sample draws images from a diffusion model");
  }
  const data::Manifest manifest = data::Manifest::load(parsed.has("data") ? parsed.flags.at("data") : config.data.path);
  const std::vector<std::int64_t>& shape = manifest.fields.front().shape;
  const Request wanted = sample_request(parsed, manifest.num_classes, config.model.unet_class_cond);
  model::DiffusionSampling options = diffusion_sampling(parsed, config);
  options.low = (0 - manifest.input_mean) / manifest.input_std;  // pixel 0 and 1, normalized
  options.high = (1 - manifest.input_mean) / manifest.input_std;
  const std::int64_t batch = int_flag(parsed, "sample", "batch-size", "64");
  if (batch < 1) throw ConfigError("sample: --batch-size must be at least 1");
  const std::string out = parsed.flags.at("out");

  const std::shared_ptr<model::Model> model =
      checkpoint_model(reader, config, {shape, manifest.num_classes, false}, train::Weights::kAverageIfKept);
  const bool use_cuda = train::resolve_use_cuda(config.dist.device, train::visible_gpus());
  RankStart start = config_start(config, use_cuda);
  start.backend.reset();  // no gradients: the control plane gathers the images
  const Ranks ranks = start_ranks(start);
  model->module().to(ranks.device);
  model->module().eval();
  const int rank = ranks.bootstrap->world_rank();
  const int world = ranks.bootstrap->world_size();
  std::filesystem::create_directories(out);

  const auto count = static_cast<std::int64_t>(wanted.labels.size());
  const std::int64_t first = count * rank / world;
  const std::int64_t last = count * (rank + 1) / world;
  const model::NoiseSchedule schedule(config.diffusion.schedule, config.diffusion.steps);
  const std::int64_t image_bytes = shape[0] * shape[1] * shape[2];
  std::string mine;
  const Timer timer;
  for (std::int64_t start_at = first; start_at < last; start_at += batch) {
    const std::int64_t end = std::min(last, start_at + batch);
    std::vector<std::int64_t> images(static_cast<std::size_t>(end - start_at));
    std::iota(images.begin(), images.end(), start_at);
    const std::vector<std::int64_t> labels(wanted.labels.begin() + start_at, wanted.labels.begin() + end);
    const std::vector<std::uint8_t> pixels =
        to_pixels(model::sample_images(*model, schedule, options, shape, labels, images, ranks.device), manifest);
    for (std::size_t i = 0; i < images.size(); ++i) {
      const std::vector<std::uint8_t> one(pixels.begin() + static_cast<std::ptrdiff_t>(i) * image_bytes,
                                          pixels.begin() + static_cast<std::ptrdiff_t>(i + 1) * image_bytes);
      io::write_png(out + "/" + image_name(images[i], labels[i]), one, shape[2], shape[1], shape[0]);
    }
    mine.append(reinterpret_cast<const char*>(pixels.data()), pixels.size());
  }
  const double seconds = timer.elapsed_s();
  const std::vector<std::string> gathered = ranks.bootstrap->allgather_string(mine);
  if (rank == 0) {
    std::string all;
    for (const std::string& part : gathered) all += part;
    write_grid(out + "/grid.png", all, count, wanted.columns, shape);
    log::info("sample: {} image(s) by {} on {} rank(s), {} steps, guidance {}: {:.2f} images/s on rank 0; {}/grid.png",
              count, options.sampler == model::DiffusionSampler::kDdim ? "ddim" : "ddpm", world, options.steps,
              options.guidance, seconds > 0 ? static_cast<double>(last - first) / seconds : 0.0, out);
  }
  log::shutdown();
  return 0;
}

}  // namespace hpctrain::cli
