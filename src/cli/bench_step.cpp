// `hpctrain bench step`: one training step of a model taken apart: forward+backward alone, the
// gradient reduction alone (bucketed, and as one allreduce of all gradient bytes), and the whole
// step with GradSync with overlap off and on; exposed communication = step - compute. The model's
// FLOPs are counted as training counts them (model/flops.h), for model TFLOP/s and MFU.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>

#include "bench.h"
#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/config/decoder_config.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/ddp/grad_sync.h"
#include "hpctrain/launch/command_start.h"
#include "hpctrain/model/autocast.h"
#include "hpctrain/model/flops.h"
#include "hpctrain/model/language_model.h"
#include "hpctrain/model/model.h"
#include "hpctrain/observe/mfu.h"
#include "hpctrain/runtime/device.h"
#include "hpctrain/runtime/preflight.h"
#include "hpctrain/train/step_loss.h"

namespace hpctrain::cli {
namespace {

const char* const kStepUsage =
    "usage: [mpirun -np N] hpctrain bench step [--model fashion_cnn|mlp|resnet|gpt|llama] [--batch-size N]\n"
    "                                          [--steps 20] [--bucket-mb 25] [--device cpu|cuda]\n"
    "                                          [--precision fp32|bf16|fp16] [--tf32 true|false]\n"
    "                                          [--check-collectives true|false]\n"
    "         gpt only: [--layers 12] [--heads 12] [--embd 768] [--block-size 1024] [--vocab 50257]\n"
    "         llama only: --hf-config FILE (a config.json: configs/models/ has some) [--block-size 1024]\n"
    "         sharding: --zero-stage 0|1|2|3 [--optimizer adamw|sgd] (on a CPU, so without --tf32)\n"
    "         the update: --update [--cuda-graphs] [--profile FILE]\n\n"
    "Times one training step of --model on random data, batch --batch-size per rank (default 64;\n"
    "8 for gpt): classifiers on Fashion-MNIST-shaped samples (1x28x28, 10 classes); gpt, by\n"
    "default GPT-2 small (124 M parameters), on windows of --block-size random tokens. Cases:\n"
    "forward+backward alone; the gradient reduction alone, through GradSync's buckets of\n"
    "--bucket-mb and as one allreduce of all gradient bytes; and the whole step with GradSync,\n"
    "overlap off and on. 3 untimed steps, then --steps timed ones; the median over steps (min and\n"
    "max in the last columns), of the slowest rank. Cases compared are timed in turn, step by step, so they see the same machine:\n"
    "the two reductions; and each step with a forward+backward of its own, exposed = the median\n"
    "of step - forward+backward over the steps: the communication the step waits for. With\n"
    "one rank GradSync has nothing to do and adds nothing. --precision and --tf32 act as\n"
    "train.precision and train.tf32 do (fp16 without loss scaling: the step is timed, not\n"
    "trained). --check-collectives acts as dist.check_collectives does (default true: one small\n"
    "allreduce before each collective checks that the ranks issue the same one). Model TFLOP/s per\n"
    "device: the FLOPs training counts\n"
    "(3x the first forward's) over the case's time; MFU against the peak train.peak_tflops\n"
    "would use on a known GPU (none on a CPU or in full float32).\n"
    "With --zero-stage, instead: whole optimizer steps as training takes them (forward, backward,\n"
    "reduction, --optimizer, default adamw, and with stages 1 and 2 the all-gather) at\n"
    "dist.zero_stage S (train.precision from --precision), the bytes each rank holds and the growth\n"
    "of peak RSS over the RSS before the model was built (largest rank): run it once per stage\n"
    "and compare (jobs/bench/zero.sh alternates them).\n"
    "With --update, instead: whole optimizer steps as training takes them (train::Step: forward,\n"
    "backward, the finiteness check, AdamW), one model per case, timed in turn: AdamW one tensor\n"
    "at a time (optim.fused=false), as multi-tensor kernels (optim.fused=true) and, with\n"
    "--cuda-graphs, forward+backward replayed from a CUDA graph (train.cuda_graphs=true).\n"
    "--profile FILE then writes a trace of 3 multi-tensor steps (Chrome trace-event JSON, from\n"
    "libtorch's profiler; jobs/bench/profile_summary.py sums it up).\n";

}  // namespace

config::Config step_config(const BenchModel& bench, const std::map<std::string, std::string>& options) {
  std::map<std::string, std::string> all{{"data.path", "/unused"}};
  all.insert(options.begin(), options.end());
  config::Config config = config::resolve("", all);
  config.model = bench.config;
  return config;
}

data::Batch random_batch(const model::ModelSpec& spec, std::int64_t batch, int ranks, c10::Device device) {
  const auto on_device = torch::TensorOptions().device(device);
  std::vector<std::int64_t> shape{batch};
  shape.insert(shape.end(), spec.input_shape.begin(), spec.input_shape.end());
  data::Batch out;
  out.input = spec.token_ids ? torch::randint(0, spec.num_classes, shape, on_device.dtype(torch::kLong))
                             : torch::rand(shape, on_device);
  out.target = torch::randint(0, spec.num_classes, spec.token_ids ? shape : std::vector<std::int64_t>{batch},
                              on_device.dtype(torch::kLong));
  out.weight = torch::ones({batch}, on_device);
  out.real = batch;
  out.global_real = batch * ranks;
  return out;
}

StepTable::StepTable(const model::ModelSpec& spec, std::int64_t batch, int ranks, double flops_per_sample,
                     std::optional<observe::PeakFlops> peak)
    : spec_(spec), batch_(batch), ranks_(ranks), flops_per_sample_(flops_per_sample), peak_(std::move(peak)) {}

void StepTable::print_header() const {
  if (peak_) std::printf("# MFU against %g TFLOP/s per device (%s)\n", peak_->tflops, peak_->source.c_str());
  std::printf("%-34s %10s %12s %12s %14s %8s %10s %10s\n", "case", "ms", "samples/s", "tokens/s", "TFLOP/s/device",
              "MFU", "min ms", "max ms");
}

void StepTable::row(const char* name, const Spread& time, bool rate) const {
  const double seconds = time.median;
  std::printf("%-34s %10.3f", name, seconds * 1e3);
  if (!rate) {
    std::printf(" %12s %12s %14s %8s", "-", "-", "-", "-");
  } else {
    const double samples_per_s = static_cast<double>(batch_ * ranks_) / seconds;
    const double tflops = observe::model_tflops(static_cast<double>(batch_) / seconds, flops_per_sample_);
    std::printf(" %12.0f", samples_per_s);
    if (spec_.token_ids) {
      std::printf(" %12.0f", samples_per_s * static_cast<double>(spec_.input_shape[0]));
    } else {
      std::printf(" %12s", "-");
    }
    std::printf(" %14.4g", tflops);
    if (peak_) {
      std::printf(" %7.2f%%", 100.0 * observe::mfu(tflops, 1, peak_->tflops));
    } else {
      std::printf(" %8s", "-");
    }
  }
  std::printf(" %10.3f %10.3f\n", time.min * 1e3, time.max * 1e3);
}

StepOptions step_options(const config::ParsedArgs& parsed, const BenchModel& bench) {
  StepOptions o;
  o.batch = int_flag(parsed, "bench step", "batch-size", std::to_string(bench.default_batch));
  o.steps = static_cast<int>(int_flag(parsed, "bench step", "steps", "20"));
  o.bucket_mb = int_flag(parsed, "bench step", "bucket-mb", "25");
  const std::string device_option = text_flag(parsed, "device", "cpu");
  o.precision_name = text_flag(parsed, "precision", "fp32");
  const std::string tf32_option = text_flag(parsed, "tf32", "true");
  if (o.batch < 1 || o.steps < 1 || o.bucket_mb < 1) {
    throw ConfigError("bench step: --batch-size, --steps and --bucket-mb must be >= 1");
  }
  if (device_option != "cpu" && device_option != "cuda") {
    throw ConfigError("bench step: --device must be cpu or cuda, got '" + device_option + "'");
  }
  if (!config::parse_choice(o.precision_name, o.precision)) {
    throw ConfigError("bench step: --precision must be fp32, bf16 or fp16, got '" + o.precision_name + "'");
  }
  if (tf32_option != "true" && tf32_option != "false") {
    throw ConfigError("bench step: --tf32 must be true or false, got '" + tf32_option + "'");
  }
  o.tf32 = tf32_option == "true";
  o.use_cuda = device_option == "cuda";
  if (o.use_cuda && runtime::visible_gpus() == 0) {
    throw ConfigError("bench step --device cuda: libtorch sees no GPU (CPU-only libtorch, no GPU, "
                      "or CUDA_VISIBLE_DEVICES hides them); use --device cpu");
  }
  if (o.precision == config::Precision::kFp16 && !o.use_cuda) {
    throw ConfigError("bench step --precision fp16 needs --device cuda (on the CPU autocast computes in bf16 only)");
  }
  comm::validate_backend(config::Backend::kAuto, o.use_cuda);
  const std::string checked = text_flag(parsed, "check-collectives", "true");
  if (checked != "true" && checked != "false") {
    throw ConfigError("bench step: --check-collectives must be true or false, got '" + checked + "'");
  }
  o.check_collectives = checked == "true";
  return o;
}

std::string text_flag(const config::ParsedArgs& parsed, const std::string& name, const std::string& fallback) {
  return parsed.has(name) ? parsed.flags.at(name) : fallback;
}

// --model llama: the shape of --hf-config's config.json, on windows of --block-size random tokens.
BenchModel llama_bench_model(const config::ParsedArgs& parsed, BenchModel bench) {
  for (const char* flag : {"layers", "heads", "embd", "vocab"}) {
    if (parsed.has(flag)) {
      throw ConfigError(std::string("bench step: --") + flag + " is for --model gpt; llama's shape is --hf-config's");
    }
  }
  if (!parsed.has("hf-config")) throw ConfigError("bench step --model llama needs --hf-config FILE (a config.json)");
  config::ModelConfig& m = bench.config;
  m.hf_config = parsed.flags.at("hf-config");
  const config::DecoderConfig shape = config::read_decoder_config(m.hf_config);
  m.gpt_block_size = int_flag(parsed, "bench step", "block-size", "1024");
  if (m.gpt_block_size < 1 || m.gpt_block_size > model::context_length(shape)) {
    throw ConfigError("bench step: --block-size must be from 1 to " + shape.where + "'s context, " +
                      std::to_string(model::context_length(shape)));
  }
  bench.spec = {{m.gpt_block_size}, shape.vocab_size, /*token_ids=*/true};
  bench.default_batch = 8;
  return bench;
}

BenchModel bench_model(const config::ParsedArgs& parsed) {
  BenchModel bench;
  config::ModelConfig& m = bench.config;
  const std::string name = text_flag(parsed, "model", "fashion_cnn");
  if (!config::parse_choice(name, m.name)) {
    throw ConfigError("bench step: --model must be one of " + config::choice_list<config::ModelName>() + ", got '" +
                      name + "'");
  }
  if (m.name == config::ModelName::kUnet) {
    throw ConfigError("bench step: --model unet trains on the diffusion objective, which bench step does not time; "
                      "jobs/bench/compare.sh --only unet times its training and sampling");
  }
  m.mlp_hidden = "512,256";
  m.dropout = 0.0;
  if (m.name == config::ModelName::kLlama) return llama_bench_model(parsed, bench);
  if (parsed.has("hf-config")) throw ConfigError("bench step: --hf-config is for --model llama");
  if (m.name != config::ModelName::kGpt) {
    for (const char* flag : {"layers", "heads", "embd", "block-size", "vocab"}) {
      if (parsed.has(flag)) throw ConfigError(std::string("bench step: --") + flag + " is for --model gpt");
    }
    bench.spec = {{1, 28, 28}, 10};
    return bench;
  }
  m.gpt_layers = int_flag(parsed, "bench step", "layers", "12");
  m.gpt_heads = int_flag(parsed, "bench step", "heads", "12");
  m.gpt_embd = int_flag(parsed, "bench step", "embd", "768");
  m.gpt_block_size = int_flag(parsed, "bench step", "block-size", "1024");
  const std::int64_t vocab = int_flag(parsed, "bench step", "vocab", "50257");
  if (m.gpt_layers < 1 || m.gpt_heads < 1 || m.gpt_embd < 1 || m.gpt_block_size < 1 || vocab < 2) {
    throw ConfigError("bench step: --layers, --heads, --embd and --block-size must be >= 1 and --vocab >= 2");
  }
  if (m.gpt_embd % m.gpt_heads != 0) {
    throw ConfigError("bench step: --embd " + std::to_string(m.gpt_embd) + " must be a multiple of --heads " +
                      std::to_string(m.gpt_heads) + " (each head gets embd / heads channels)");
  }
  bench.spec = {{m.gpt_block_size}, vocab, /*token_ids=*/true};
  bench.default_batch = 8;
  return bench;
}

const char* bench_step_usage() { return kStepUsage; }

int bench_step(const config::ParsedArgs& parsed, StepMode mode) {
  const BenchModel bench = bench_model(parsed);
  return mode(parsed, bench, step_options(parsed, bench));
}

int bench_step_parts(const config::ParsedArgs& /*parsed*/, const BenchModel& bench, const StepOptions& options) {
  const model::ModelSpec& spec = bench.spec;
  const std::int64_t batch = options.batch;
  const int steps = options.steps;
  const std::int64_t bucket_mb = options.bucket_mb;
  const bool use_cuda = options.use_cuda;
  const config::Precision precision = options.precision;
  const std::string& precision_name = options.precision_name;
  auto net = model::make_model(bench.config, spec);  // throws for options it cannot use

  const Ranks ranks = start_ranks(bench_start(use_cuda, config::Backend::kAuto, options.check_collectives));
  const auto& bootstrap = ranks.bootstrap;
  const c10::Device device = ranks.device;
  const auto& comm = ranks.comm;
  const bool tf32 = options.tf32;
  runtime::set_cuda_math(tf32, /*cudnn_benchmark=*/false);
  torch::manual_seed(7 + static_cast<std::uint64_t>(bootstrap->world_rank()));
  net->module().to(device);
  net->module().train();
  const std::vector<at::Tensor> parameters = net->module().parameters();
  const auto on_device = torch::TensorOptions().device(device);
  std::vector<std::int64_t> input_shape{batch};
  input_shape.insert(input_shape.end(), spec.input_shape.begin(), spec.input_shape.end());
  const at::Tensor input = spec.token_ids ? torch::randint(0, spec.num_classes, input_shape, on_device.dtype(torch::kLong))
                                          : torch::rand(input_shape, on_device);
  const at::Tensor target = torch::randint(0, spec.num_classes, spec.token_ids ? input_shape : std::vector<std::int64_t>{batch},
                                           on_device.dtype(torch::kLong));
  const std::optional<at::ScalarType> forward_dtype = model::autocast_dtype(precision);
  const auto forward = [&] {
    const model::AutocastScope autocast(device.type(), forward_dtype);
    return net->forward(input);
  };
  const auto forward_backward = [&] {
    for (const auto& p : parameters) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
    train::per_sample_loss(forward(), target, 0.0).mean().backward();
  };
  const double flops_per_sample =
      model::training_flops_per_sample(model::count_flops([&] { forward(); }) / static_cast<double>(batch));

  const Rounds rounds{3, steps, device};
  const Spread compute_s = slowest_spread(*bootstrap, time_in_turn({{"forward+backward", forward_backward}}, rounds)[0]);
  std::int64_t numel = 0;
  for (const auto& p : parameters) numel += p.numel();
  at::Tensor flat = torch::zeros({numel}, parameters.front().options());

  ddp::GradSyncOptions sync_options;
  sync_options.bucket_bytes = bucket_mb << 20;
  sync_options.warn_unused = false;  // "buckets alone" reduces without a backward on purpose
  Spread flat_s;
  Spread bucketed_s;
  Spread step_s[2];
  Spread exposed_s[2];
  size_t buckets = 0;
  for (const bool overlap : {false, true}) {
    sync_options.overlap = overlap;
    ddp::GradSync sync(*comm, parameters, sync_options);
    buckets = sync.bucket_count();
    if (!overlap) {
      // Timed in turn, the two reductions of the same bytes see the same machine.
      const auto reductions =
          time_in_turn({{"one allreduce", [&] { comm->allreduce_blocking(flat, comm::ReduceOp::kAvg); }},
                        {"buckets", [&] { sync.average_gradients(); }}},
                       rounds);
      flat_s = slowest_spread(*bootstrap, reductions[0]);
      bucketed_s = slowest_spread(*bootstrap, reductions[1]);
    }
    // Each step timed in turn with forward+backward alone, which it is compared with.
    const auto paired = time_in_turn({{"forward+backward", forward_backward},
                                      {"step", [&] {
                                         sync.begin_backward(true);
                                         forward_backward();
                                         sync.average_gradients();
                                       }}},
                                     rounds);
    step_s[overlap ? 1 : 0] = slowest_spread(*bootstrap, paired[1]);
    exposed_s[overlap ? 1 : 0] = slowest_spread(*bootstrap, differences(paired[1], paired[0]));
  }
  const std::int64_t gpu_memory = use_cuda ? comm::gpu_memory_in_use_bytes(device.index()) : -1;

  if (bootstrap->world_rank() == 0) {
    const std::string gpu = use_cuda ? comm::gpu_name(device.index()) : "";
    const std::optional<observe::PeakFlops> peak = observe::resolve_peak_flops(0, gpu, precision, tf32);
    const double ms = 1e3;
    std::printf("# bench step: %s, %lld parameters (%.1f MB of float32 gradients) in %zu bucket(s) of "
                "%lld MiB, batch %lld per rank, %d rank(s) on %s%s%s, backend %s%s, %s%s\n"
                "# %.4g GFLOP per sample trained (3x forward); median, min and max of %d timed steps after 3 "
                "untimed, slowest rank\n",
                config::name_of(bench.config.name), static_cast<long long>(numel), numel * 4 / 1e6, buckets,
                static_cast<long long>(bucket_mb), static_cast<long long>(batch), comm->size(), device.str().c_str(),
                gpu.empty() ? "" : " ", gpu.c_str(), comm->backend().c_str(),
                options.check_collectives ? "" : " (collectives unchecked)", precision_name.c_str(),
                use_cuda && precision == config::Precision::kFp32 ? (tf32 ? " (TF32)" : " (full float32)") : "",
                flops_per_sample / 1e9, steps);
    const StepTable table(spec, batch, comm->size(), flops_per_sample, peak);
    table.print_header();
    table.row("forward+backward", compute_s, true);
    table.row("one allreduce of all gradients", flat_s, false);
    table.row("GradSync buckets alone", bucketed_s, false);
    table.row("step, overlap off", step_s[0], true);
    table.row("step, overlap on", step_s[1], true);
    std::printf("exposed communication (step - forward+backward, timed in turn): overlap off %.3f ms, on %.3f ms "
                "(min %.3f and %.3f, max %.3f and %.3f)\n",
                exposed_s[0].median * ms, exposed_s[1].median * ms, exposed_s[0].min * ms, exposed_s[1].min * ms,
                exposed_s[0].max * ms, exposed_s[1].max * ms);
    std::printf("buckets / one allreduce: %.2f\n", bucketed_s.median / flat_s.median);
    if (gpu_memory >= 0) std::printf("GPU memory in use (driver's count): %.0f MiB\n", gpu_memory / 1048576.0);
  }
  log::shutdown();
  return 0;
}

}  // namespace hpctrain::cli
