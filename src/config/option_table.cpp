#include "hpctrain/config/option_table.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "hpctrain/core/error.h"
#include "hpctrain/core/stop_signals.h"

namespace hpctrain::config {
namespace {

// --- text <-> typed values -----------------------------------------------------------------

std::int64_t parse_int(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    throw ConfigError("'" + text + "' is not an integer");
  }
  return value;
}

double parse_float(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(value)) {
    throw ConfigError("'" + text + "' is not a finite number");
  }
  return value;
}

bool parse_bool(const std::string& text) {
  if (text == "true" || text == "1" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "0" || text == "no" || text == "off") return false;
  throw ConfigError("'" + text + "' is not a boolean (true|false)");
}

std::string render_float(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

template <typename T>
constexpr OptionType option_type() {
  if constexpr (std::is_same_v<T, std::int64_t>) return OptionType::kInt;
  if constexpr (std::is_same_v<T, double>) return OptionType::kFloat;
  if constexpr (std::is_same_v<T, bool>) return OptionType::kBool;
  return OptionType::kString;
}

// --- checks: each returns an error text, or "" when the value is allowed -----------------------

template <typename T>
using Check = std::function<std::string(const T&)>;

template <typename T>
struct Rule {
  std::string allowed;
  Check<T> check;
};

template <typename T>
Rule<T> at_least(T low) {
  std::ostringstream text;
  text << ">= " << low;
  return {text.str(), [low, t = text.str()](const T& v) { return v >= low ? "" : "must be " + t; }};
}

template <typename T>
Rule<T> between(T low, T high) {
  std::ostringstream text;
  text << "[" << low << ", " << high << "]";
  return {text.str(), [low, high, t = text.str()](const T& v) {
            return v >= low && v <= high ? "" : "must be in " + t;
          }};
}

Rule<double> positive() {
  return {"> 0", [](const double& v) { return v > 0 ? "" : std::string("must be > 0"); }};
}

Rule<double> zero_or_at_least(double low) {
  std::ostringstream text;
  text << "0 or >= " << low;
  return {text.str(), [low, t = text.str()](const double& v) { return v == 0 || v >= low ? "" : "must be " + t; }};
}

Rule<double> in_unit_interval() {
  return {"[0, 1)", [](const double& v) {
            return v >= 0 && v < 1 ? "" : std::string("must be in [0, 1)");
          }};
}

Rule<std::string> not_empty() {
  return {"non-empty", [](const std::string& v) {
            return v.empty() ? std::string("must not be empty") : std::string();
          }};
}

Rule<std::string> step_range() {
  return {"A-B with 1 <= A <= B, or empty", [](const std::string& v) {
            try {
              parse_step_range(v);
              return std::string();
            } catch (const ConfigError& error) {
              return std::string(error.what());
            }
          }};
}

Rule<std::string> int_list() {
  return {"comma-separated integers >= 1", [](const std::string& v) {
            std::stringstream in(v);
            std::string item;
            int count = 0;
            while (std::getline(in, item, ',')) {
              char* end = nullptr;
              const long n = std::strtol(item.c_str(), &end, 10);
              if (item.empty() || *end != '\0' || n < 1) {
                return std::string("must be comma-separated integers >= 1");
              }
              ++count;
            }
            return count > 0 ? std::string() : std::string("must list at least one width");
          }};
}

Rule<std::string> signal_list() {
  return {"comma-separated signal names", [](const std::string& v) {
            const std::string problem = sys::check_signal_list(v);
            return problem.empty() ? problem : "must be comma-separated signal names: " + problem;
          }};
}

template <typename E>
E parse_enum(const std::string& text) {
  E value{};
  if (!parse_choice(text, value)) throw ConfigError("'" + text + "' must be one of " + choice_list<E>());
  return value;
}

// ckpt.resume: "auto", "none", or a checkpoint's path.
ResumeFrom parse_resume(const std::string& text) {
  if (text.empty()) throw ConfigError("'' must not be empty");
  if (text == "auto") return {ResumeFrom::Kind::kAuto, ""};
  if (text == "none") return {ResumeFrom::Kind::kNone, ""};
  return {ResumeFrom::Kind::kPath, text};
}

template <typename T>
T parse_as(const std::string& text) {
  if constexpr (std::is_same_v<T, std::int64_t>) return parse_int(text);
  if constexpr (std::is_same_v<T, double>) return parse_float(text);
  if constexpr (std::is_same_v<T, bool>) return parse_bool(text);
  if constexpr (std::is_same_v<T, std::string>) return text;
  if constexpr (std::is_enum_v<T>) return parse_enum<T>(text);
  if constexpr (std::is_same_v<T, ResumeFrom>) return parse_resume(text);
}

template <typename T>
std::string render_as(const T& value) {
  if constexpr (std::is_same_v<T, std::int64_t>) return std::to_string(value);
  if constexpr (std::is_same_v<T, double>) return render_float(value);
  if constexpr (std::is_same_v<T, bool>) return value ? "true" : "false";
  if constexpr (std::is_same_v<T, std::string>) return value;
  if constexpr (std::is_enum_v<T>) return name_of(value);
  if constexpr (std::is_same_v<T, ResumeFrom>) return value.text();
}

// One row: binds "section.key" to Config::*section .*field with its type, default, help and rule.
template <typename Section, typename T>
Option row(const char* name, Section Config::*section, T Section::*field,
           std::optional<std::string> default_text, const char* help, Rule<T> rule = {}) {
  Option option;
  option.name = name;
  option.type = option_type<T>();
  option.default_text = std::move(default_text);
  option.help = help;
  option.allowed = rule.allowed;
  if constexpr (std::is_enum_v<T>) option.allowed = choice_list<T>();
  option.assign = [section, field, check = rule.check](Config& c, const std::string& text) {
    T value = parse_as<T>(text);
    if (check) {
      const std::string problem = check(value);
      if (!problem.empty()) throw ConfigError("'" + text + "' " + problem);
    }
    (c.*section).*field = std::move(value);
  };
  option.render = [section, field](const Config& c) { return render_as<T>((c.*section).*field); };
  return option;
}

std::vector<Option> build_table() {
  using C = Config;
  using I = std::int64_t;
  return {
      row("run.dir", &C::run, &RunConfig::dir, "runs/default",
          "Run directory: resolved config, per-rank logs, metrics.jsonl and checkpoints/ go here.",
          not_empty()),
      row("run.lock_stale_s", &C::run, &RunConfig::lock_stale_s, "30",
          "Seconds without a heartbeat after which a lock on run.dir held on another host is taken "
          "as a dead job's and taken over (one job per run directory; a job of the same Slurm job "
          "id, or whose process on this host has ended, takes it over at once).",
          positive()),

      row("data.path", &C::data, &DataConfig::path, std::nullopt,
          "Dataset directory written by `hpctrain prepare` (holds manifest.json).", not_empty()),
      row("data.train_split", &C::data, &DataConfig::train_split, "train",
          "Split of the dataset to train on.", not_empty()),
      row("data.eval_split", &C::data, &DataConfig::eval_split, "test",
          "Split evaluated at the end of every epoch; empty disables evaluation."),
      row("data.prefetch", &C::data, &DataConfig::prefetch, "2",
          "Batches read ahead of the training loop by the loader's threads; 0 reads each batch "
          "in the training thread. Small batches are read further ahead, two runs of about 1 MiB "
          "(at most 1,024 batches), and a thread that waits sleeps until a whole run can pass (a "
          "hand-off costs as much as reading a small batch from memory).",
          at_least<I>(0)),
      row("data.loader_threads", &C::data, &DataConfig::loader_threads, "1",
          "Threads reading batches ahead (with data.prefetch >= 1). HDF5 reads are serialized; "
          "checking blocks and copying samples into batches run in parallel, which pays when "
          "batches come from memory (bench data shows both).",
          at_least<I>(1)),
      row("data.io", &C::data, &DataConfig::io, "mmap",
          "How a sample split is read: mmap, each rank mapping the shard files and reading the "
          "blocks it needs from the page cache as batches first touch them, one copy per node "
          "shared by its ranks, whose inputs take no room in data.cache_mb; posix, each rank "
          "reading its blocks through HDF5 into its own memory; mpio, all ranks reading a split "
          "held in memory together before training through MPI-IO, every byte once. Checksums "
          "are checked in all three; compressed, uint16 or uint32 inputs are read as with posix "
          "(docs/dataset-format.md)."),
      row("data.cache_mb", &C::data, &DataConfig::cache_mb, "256",
          "Memory per split and rank for its data, in MiB: a split that fits is kept in memory "
          "once read (shuffled order then costs what file order costs); of a larger one the "
          "most recently used blocks (one HDF5 chunk, about 1 MiB, each) are kept. With "
          "data.io=mmap the inputs stay in the page cache and only the labels count (8 bytes a "
          "sample).",
          between<I>(1, I{1} << 30)),
      row("data.shuffle_window_mb", &C::data, &DataConfig::shuffle_window_mb, "0",
          "0: each epoch is one global permutation of the split, fast while the split fits "
          "data.cache_mb. N: for a split larger than memory, its chunks are visited in a random "
          "order and the samples of each N MiB of chunks are shuffled together, so every chunk "
          "is read once per epoch; needs data.cache_mb >= 2N (docs/dataset-format.md).",
          between<I>(0, I{1} << 29)),
      row("data.random_crop", &C::data, &DataConfig::random_crop, "0",
          "Training augmentation for images: pad each side with this many zero pixels, then crop "
          "back to the image size at a random offset (torchvision's RandomCrop(padding=N)); 0: off. "
          "Drawn per sample from (train.seed, epoch, sample index), so a resume repeats it.",
          at_least<I>(0)),
      row("data.random_flip", &C::data, &DataConfig::random_flip, "false",
          "Training augmentation for images: mirror each image left-right with probability 1/2, "
          "drawn like data.random_crop."),

      row("model.name", &C::model, &ModelConfig::name, "fashion_cnn",
          "Model to train: a built-in one, or torchscript (a module saved from Python, model.path)."),
      row("model.path", &C::model, &ModelConfig::path, "",
          "TorchScript file (torch.jit.save of torch.jit.script(module)) that model.name=torchscript "
          "trains; its forward maps a batch [B, ...sample shape] of normalized float inputs to logits "
          "[B, classes], or, on a token stream, windows of int64 token ids [B, T] "
          "(T = model.gpt_block_size) to next-token logits [B, T, vocab]. A traced module trains too, "
          "but keeps the train or eval behaviour it was traced in (dropout, BatchNorm)."),
      row("model.hf_config", &C::model, &ModelConfig::hf_config, "",
          "The Hugging Face config.json (or a directory holding one) whose shape model.name=llama "
          "takes: model_type llama, qwen2, qwen3 or mistral. Empty: model.init_from's, a model "
          "directory. docs/fine-tuning.md."),
      row("model.mlp_hidden", &C::model, &ModelConfig::mlp_hidden, "512,256",
          "Hidden layer widths of the mlp model.", int_list()),
      row("model.dropout", &C::model, &ModelConfig::dropout, "0.25",
          "Dropout probability after the hidden layers (fashion_cnn: after Linear(3136->128); gpt: on "
          "the attention weights and after each attention and MLP block; llama: none, as the family "
          "trains).",
          in_unit_interval()),
      row("model.resnet_depth", &C::model, &ModelConfig::resnet_depth, "20",
          "Layers of the resnet model: 6n+2 (20, 32, 44, 56, 110), n basic blocks per stage.",
          at_least<I>(8)),
      row("model.resnet_width", &C::model, &ModelConfig::resnet_width, "16",
          "Channels of the resnet model's first stage (the next two have 2x and 4x).", at_least<I>(1)),
      row("model.init_from", &C::model, &ModelConfig::init_from, "",
          "Start from these weights instead of random ones: a .safetensors file, a Hugging Face "
          "model directory (config.json and one or many safetensors files; model.name=llama), a PyTorch "
          "state_dict (torch.save) or an hpctrain checkpoint (its weights only). The optimizer "
          "starts fresh at step 0; a checkpoint in run.dir still takes precedence (resume). "
          "docs/fine-tuning.md."),
      row("model.init_names", &C::model, &ModelConfig::init_names, "auto",
          "The names model.init_from uses: hpctrain's own, or hf-gpt2 (Hugging Face GPT-2: "
          "Conv1D weights transposed, lm_head tied to wte) for the gpt model; auto tells them "
          "apart by the file's names and shapes."),
      row("model.init_strict", &C::model, &ModelConfig::init_strict, "true",
          "Refuse model.init_from unless every parameter and buffer is in it with its shape and "
          "nothing else is; false loads what matches and logs the rest."),
      row("model.lora_rank", &C::model, &ModelConfig::lora_rank, "0",
          "Rank r of LoRA adapters beside the layers model.lora_targets names (gpt, llama, torchscript); the base "
          "weights are frozen and only the adapters train, communicate and are checkpointed. 0: "
          "no adapters. docs/fine-tuning.md.",
          at_least<I>(0)),
      row("model.lora_alpha", &C::model, &ModelConfig::lora_alpha, "8",
          "The adapters' update is scaled by model.lora_alpha / model.lora_rank.", positive()),
      row("model.lora_dropout", &C::model, &ModelConfig::lora_dropout, "0",
          "Dropout probability on the adapters' input (the base layer sees its input whole).",
          in_unit_interval()),
      row("model.lora_targets", &C::model, &ModelConfig::lora_targets, "attn",
          "The gpt layers that get adapters, comma-separated: attn (attention's c_attn), proj "
          "(attention's c_proj), fc (mlp.c_fc), mlp_proj (mlp.c_proj), head (the output layer). "
          "For a llama model: Hugging Face's module names (q_proj, k_proj, v_proj, o_proj, gate_proj, "
          "up_proj, down_proj, lm_head), shell patterns on whole names, or all-linear. "
          "For a torchscript model: names of its modules with a 2-d weight, matched as PEFT's "
          "target_modules (fc: every module named fc or ending in .fc) or as shell patterns "
          "(layers.*.proj)."),
      row("model.lora_train", &C::model, &ModelConfig::lora_train, "",
          "Base parameters that train beside the adapters, comma-separated: bias (every bias), "
          "norm (the LayerNorms' scales); empty: the adapters alone."),
      row("model.lora_base_dtype", &C::model, &ModelConfig::lora_base_dtype, "float32",
          "The frozen base's weight matrices (and embeddings) in float32, or bf16 (half the "
          "memory; their products computed in bfloat16, as QLoRA-style training does). The "
          "adapters, norms and biases stay float32."),
      row("model.gpt_layers", &C::model, &ModelConfig::gpt_layers, "4",
          "Transformer blocks of the gpt model (n_layer); 0: as many as model.init_from has.",
          at_least<I>(0)),
      row("model.gpt_heads", &C::model, &ModelConfig::gpt_heads, "4",
          "Attention heads per block of the gpt model (n_head); must divide model.gpt_embd.",
          at_least<I>(1)),
      row("model.gpt_embd", &C::model, &ModelConfig::gpt_embd, "128",
          "Width of the gpt model's residual stream (n_embd); 0: model.init_from's.", at_least<I>(0)),
      row("model.gpt_block_size", &C::model, &ModelConfig::gpt_block_size, "128",
          "Context length of the gpt model (and of a TorchScript language model): tokens per "
          "training window; 0: the positions model.init_from has (gpt). A llama model trains on "
          "windows of this length too, at most its config.json's max_position_embeddings.", at_least<I>(0)),
      row("model.gpt_activation", &C::model, &ModelConfig::gpt_activation, "auto",
          "The gpt MLP's activation: gelu (exact, nanoGPT's), gelu_tanh (the tanh approximation "
          "GPT-2 was trained with), or auto: gelu_tanh when model.init_from's weights have Hugging "
          "Face GPT-2's names (model.init_names, given or told apart), else gelu. The choice is "
          "logged, and the resolved config names it."),
      row("model.activation_checkpointing", &C::model, &ModelConfig::activation_checkpointing, "false",
          "Keep only each gpt block's input for backward and run the block's forward again there "
          "(dropout and autocast as the first time): activation memory of one block instead of "
          "all, for one more forward per step. gpt and llama. docs/fine-tuning.md."),
      row("model.unet_channels", &C::model, &ModelConfig::unet_channels, "32",
          "Channels of the unet's first level (a multiple of 8: its GroupNorms have 8 groups); level i "
          "has this times the i-th of model.unet_mults. docs/diffusion.md.",
          between<I>(8, 4096)),
      row("model.unet_mults", &C::model, &ModelConfig::unet_mults, "1,2,2",
          "The unet's channel multipliers, one level each, comma-separated; every level but the "
          "last halves the resolution, so the images' height and width must divide by 2^(levels-1).",
          int_list()),
      row("model.unet_attention", &C::model, &ModelConfig::unet_attention, "false",
          "Self-attention (one head) at the unet's lowest resolution, in its last down level, its "
          "middle and its first up level."),
      row("model.unet_class_cond", &C::model, &ModelConfig::unet_class_cond, "true",
          "Condition the unet on the sample's class (an embedding added to the time embedding), so "
          "that sampling can ask for a class; false: unconditional."),
      row("model.cond_drop", &C::model, &ModelConfig::cond_drop, "0.1",
          "Probability that a training sample's class is replaced by 'no class' (classifier-free "
          "guidance learns both from one model). Drawn per sample from (train.seed, epoch, sample "
          "index), as the diffusion noise is.",
          in_unit_interval()),

      row("optim.name", &C::optim, &OptimConfig::name, "adamw", "Optimizer."),
      row("optim.lr", &C::optim, &OptimConfig::lr, "0.002", "Learning rate.", positive()),
      row("optim.weight_decay", &C::optim, &OptimConfig::weight_decay, "0.0001",
          "Weight decay (decoupled for adamw, L2 for sgd).", at_least(0.0)),
      row("optim.momentum", &C::optim, &OptimConfig::momentum, "0.9", "Momentum of sgd.",
          in_unit_interval()),
      row("optim.beta1", &C::optim, &OptimConfig::beta1, "0.9", "First-moment decay of adamw.",
          in_unit_interval()),
      row("optim.beta2", &C::optim, &OptimConfig::beta2, "0.999", "Second-moment decay of adamw.",
          in_unit_interval()),
      row("optim.eps", &C::optim, &OptimConfig::eps, "1e-08", "Denominator epsilon of adamw.",
          positive()),
      row("optim.nesterov", &C::optim, &OptimConfig::nesterov, "false",
          "Nesterov momentum for sgd (needs optim.momentum > 0)."),
      row("optim.decay_bias_and_norm", &C::optim, &OptimConfig::decay_bias_and_norm, "true",
          "Apply optim.weight_decay to biases and normalization weights (the one-dimensional "
          "parameters) too; false exempts them, as most transformer recipes do."),
      row("optim.fused", &C::optim, &OptimConfig::fused, "true",
          "adamw's update as a few multi-tensor kernels over all parameters (libtorch's fused AdamW "
          "where it has one for the device, else its _foreach_ operations); false: about ten kernels "
          "per parameter (torch::optim::AdamW). The same arithmetic up to rounding; the state and "
          "checkpoints are alike, and a resume may change it."),
      row("optim.clip_grad_norm", &C::optim, &OptimConfig::clip_grad_norm, "0",
          "Clip the gradients' global L2 norm to this value after they are averaged over the "
          "ranks (so every rank clips alike); 0: no clipping.",
          at_least(0.0)),
      row("optim.lr_scaling", &C::optim, &OptimConfig::lr_scaling, "none",
          "Scale optim.lr with the global batch (ranks x train.batch_size x accumulation) "
          "relative to optim.base_batch: linear (lr x global/base), sqrt, or none."),
      row("optim.base_batch", &C::optim, &OptimConfig::base_batch, "0",
          "The global batch optim.lr was tuned for; required by optim.lr_scaling.",
          at_least<I>(0)),

      row("optim.schedule", &C::optim, &OptimConfig::schedule, "constant",
          "Learning-rate schedule after the warmup: constant; step (x optim.step_gamma every "
          "optim.step_every steps); or cosine decay to 0 at optim.decay_steps."),
      row("optim.step_every", &C::optim, &OptimConfig::step_every, "0",
          "Step schedule: optimizer steps (after the warmup) between learning-rate drops; "
          "required by optim.schedule=step.",
          at_least<I>(0)),
      row("optim.step_gamma", &C::optim, &OptimConfig::step_gamma, "0.1",
          "Step schedule: the factor applied to the learning rate at each drop.", positive()),
      row("optim.warmup_steps", &C::optim, &OptimConfig::warmup_steps, "0",
          "Optimizer steps of linear warmup, from optim.lr / warmup_steps up to optim.lr.",
          at_least<I>(0)),
      row("optim.decay_steps", &C::optim, &OptimConfig::decay_steps, "0",
          "Optimizer steps at which the cosine schedule reaches 0 (counting the warmup); 0: the "
          "run's length, train.max_steps or else train.epochs whole epochs. Set it to keep the "
          "schedule when a run is split into several with train.max_steps.",
          at_least<I>(0)),

      row("train.epochs", &C::train, &TrainConfig::epochs, "1", "Passes over the training split.",
          at_least<I>(1)),
      row("train.max_steps", &C::train, &TrainConfig::max_steps, "0",
          "Stop after this many optimizer steps in total; 0 means no limit.", at_least<I>(0)),
      row("train.batch_size", &C::train, &TrainConfig::batch_size, "64",
          "Samples per rank per step (global batch = world size x batch_size).", at_least<I>(1)),
      row("train.eval_every", &C::train, &TrainConfig::eval_every, "0",
          "Also evaluate on data.eval_split every this many optimizer steps (besides each "
          "epoch's end); 0: only at epoch ends.",
          at_least<I>(0)),
      row("train.eval_batch_size", &C::train, &TrainConfig::eval_batch_size, "512",
          "Samples per rank per evaluation batch.", at_least<I>(1)),
      row("train.seed", &C::train, &TrainConfig::seed, "42",
          "Seed of initialization, shuffling and dropout (the same on every rank).",
          at_least<I>(0)),
      row("train.threads", &C::train, &TrainConfig::threads, "0",
          "Intra-op threads per rank; 0: the cores this rank may run on, divided among the ranks of "
          "its node that may run on the same ones (ranks left unbound share the node's cores).",
          at_least<I>(0)),
      row("train.shuffle", &C::train, &TrainConfig::shuffle, "true",
          "Shuffle the training split every epoch (one global permutation shared by all ranks)."),
      row("train.accum_steps", &C::train, &TrainConfig::accum_steps, "1",
          "Micro-batches per optimizer step: gradients accumulate locally and are reduced once, "
          "after the last (global batch = world size x accum_steps x batch_size).",
          at_least<I>(1)),
      row("train.drop_last", &C::train, &TrainConfig::drop_last, "false",
          "Drop an epoch's last partial global batch; when false it is padded and the padding "
          "is masked out of the loss, so every sample counts exactly once."),
      row("train.global_batch", &C::train, &TrainConfig::global_batch, "0",
          "Samples per optimizer step over all ranks. When set, the accumulation steps follow "
          "from it (global_batch / (world size x train.batch_size), which must divide), so a run "
          "resumed on another number of ranks keeps its global batch and learning rate; 0: "
          "train.accum_steps decides.",
          at_least<I>(0)),
      row("train.precision", &C::train, &TrainConfig::precision, "fp32",
          "fp32; bf16: the forward pass under autocast in bfloat16 (CPU and CUDA); fp16: autocast "
          "in float16 (CUDA only) with dynamic loss scaling (train.loss_scale). Weights, gradients "
          "and optimizer state stay float32; evaluation runs in float32."),
      row("train.loss_scale", &C::train, &TrainConfig::loss_scale, "auto",
          "Dynamic loss scaling, as GradScaler does it: the loss is multiplied by a scale before "
          "backward and the averaged gradients divided by it; a step whose gradients hold inf or "
          "NaN is skipped on every rank (it still counts towards train.max_steps and the LR "
          "schedule) and the scale halved; after 2000 good steps in a row it doubles. auto: "
          "dynamic with fp16, none otherwise; dynamic: also with fp32 or bf16; none: never."),
      row("train.loss_scale_init", &C::train, &TrainConfig::loss_scale_init, "65536",
          "The loss scale a run starts from (a resume continues the checkpoint's).", positive()),
      row("train.nonfinite", &C::train, &TrainConfig::nonfinite, "skip",
          "A step whose averaged gradients hold inf or NaN (on any rank: the average spreads it "
          "to all) -- skip: not applied on any rank, counted in the metrics' skipped_steps; abort: "
          "the run stops at once (exit code 6) after checkpointing the last good state. Dynamic "
          "loss scaling skips overflowing steps by design and needs skip."),
      row("train.max_skipped", &C::train, &TrainConfig::max_skipped, "20",
          "More skipped steps than this in a row stop the run as train.nonfinite=abort does, "
          "naming the step, the first non-finite gradient and the ranks whose loss was not finite.",
          at_least<I>(0)),
      row("train.peak_tflops", &C::train, &TrainConfig::peak_tflops, "0",
          "Peak TFLOP/s of one device in the training precision, against which the metrics' mfu "
          "(model FLOP utilization) is measured: model_tflops / (world size x this). 0: the dense "
          "tensor-core peak of a known GPU (A100, H100, H200, GH200, B200) for the training "
          "precision (bf16/fp16, or TF32 for fp32 with train.tf32); otherwise no mfu (a CPU's "
          "peak depends on its cores).",
          at_least(0.0)),
      row("train.tf32", &C::train, &TrainConfig::tf32, "true",
          "On CUDA GPUs from Ampere on, float32 matrix products and cuDNN convolutions run on TF32 "
          "tensor cores (float32's range, a 10-bit mantissa; several times float32's rate), as "
          "NVIDIA's PyTorch containers do by default; false computes them in full float32 "
          "(PyTorch's own default for matrix products). No effect on a CPU, nor on what "
          "bf16/fp16 autocast runs in half precision."),
      row("train.cudnn_benchmark", &C::train, &TrainConfig::cudnn_benchmark, "false",
          "cuDNN times its convolution algorithms for each new input shape and keeps the fastest "
          "(torch.backends.cudnn.benchmark): faster steps for convolutional models on a GPU "
          "after a slower first one per shape; results may then differ in the last bits from "
          "run to run. No effect on a CPU."),
      row("train.cuda_graphs", &C::train, &TrainConfig::cuda_graphs, "false",
          "On a GPU, capture a micro-batch's forward and backward as a CUDA graph at the first step "
          "without padding from the second on, and replay it after: one launch instead of hundreds "
          "of kernels. A batch of another "
          "shape or sample count runs eagerly. Refused for now with more than one rank, "
          "dist.zero_stage > 0, dynamic loss scaling (fp16's default), model.activation_checkpointing "
          "and the diffusion objective (docs/distributed.md, \"GPU math: TF32, cuDNN, CUDA graphs\")."),
      row("train.objective", &C::train, &TrainConfig::objective, "cross_entropy",
          "What training minimizes: cross_entropy (a classifier's logits against the labels, or a "
          "language model's next tokens), or diffusion (model.name=unet predicts the noise added "
          "to an image at a random step of diffusion.steps: DDPM's mean squared error; "
          "docs/diffusion.md)."),
      row("train.label_smoothing", &C::train, &TrainConfig::label_smoothing, "0",
          "Label smoothing of the training loss (cross-entropy against (1-e) one-hot + e/classes).",
          in_unit_interval()),
      row("train.ema_decay", &C::train, &TrainConfig::ema_decay, "0",
          "Keep an exponential moving average of the trained weights: after every applied step "
          "average = decay x average + (1 - decay) x weight (0.999 averages about the last 1,000 "
          "steps). Evaluations, hpctrain eval and generate then use the average, checkpoints keep "
          "it (the ema group) and ckpt export --ema exports it; 0: none. With dist.zero_stage >= 1 "
          "each rank keeps only its share, as of the optimizer state.",
          in_unit_interval()),

      row("diffusion.steps", &C::diffusion, &DiffusionConfig::steps, "1000",
          "Noise levels T of train.objective=diffusion: each training sample gets a step t drawn "
          "uniformly from [0, T) and noise at that step's level.",
          between<I>(2, 100000)),
      row("diffusion.schedule", &C::diffusion, &DiffusionConfig::schedule, "linear",
          "The noise schedule: linear (DDPM's betas from 1e-4 to 0.02, scaled by 1000/T) or cosine "
          "(Nichol and Dhariwal's, alpha-bar a squared cosine)."),

      row("dist.bucket_mb", &C::dist, &DistConfig::bucket_mb, "25",
          "Gradients are reduced in buckets of about this many MiB, in reverse parameter order, "
          "each as soon as backward has produced all of it (docs/distributed.md). At "
          "dist.zero_stage=3, consecutive blocks are gathered together until they hold this much.",
          positive()),
      row("dist.overlap", &C::dist, &DistConfig::overlap, "true",
          "Start each bucket's allreduce during backward; false waits until backward has ended."),
      row("dist.zero_stage", &C::dist, &DistConfig::zero_stage, "0",
          "Sharded data parallelism (ZeRO, docs/distributed.md): 0 every rank holds all parameters, "
          "gradients and optimizer state; 1 each rank keeps the optimizer state of only its 1/N of "
          "the parameters (buckets are reduce-scattered and the updated parameters all-gathered); "
          "2 also its 1/N of the gradients; 3 also its 1/N of the parameters, each block's "
          "gathered just before it runs (built-in models only). 1 and 2 move the same bytes as "
          "0; 3 gathers the parameters again for backward.",
          between<I>(0, 3)),
      row("dist.check_replicas_every", &C::dist, &DistConfig::check_replicas_every, "0",
          "Every this many optimizer steps, check that the parameters are bit-identical on "
          "every rank (a fingerprint, two small collectives) and stop with an error if not; "
          "0 never checks.",
          at_least<I>(0)),
      row("dist.grad_compression", &C::dist, &DistConfig::grad_compression, "none",
          "Send gradient buckets as fp16 or bf16 (half the bytes; accumulation stays float32)."),
      row("dist.sync_bn", &C::dist, &DistConfig::sync_bn, "false",
          "BatchNorm layers compute their batch statistics over all ranks' samples (one small "
          "allreduce per layer in forward and in backward), as BatchNorm on the global batch "
          "would; false normalizes each rank's batch on its own, as PyTorch DDP does by default."),
      row("dist.timeout_s", &C::dist, &DistConfig::timeout_s, "300",
          "Seconds before a hang ends the job (exit code 5) with a line saying what hung: a "
          "collective not completed after a rank began waiting for it; a rank whose heartbeats "
          "stopped (dead or frozen; at least 1 s) or that waited this long for its loader; a rank "
          "that never joined at start-up (docs/reliability.md).",
          positive()),
      row("dist.flight_records", &C::dist, &DistConfig::flight_records, "2000",
          "Collectives each rank remembers (number, operation, bytes, dtype, bucket, times, state). "
          "On a collective timeout, a silent rank, a fatal error or SIGUSR2 every live rank writes "
          "them to <run.dir>/flight/rank-<r>.json, and the message that ends the job names the first "
          "collective where the ranks disagree; `hpctrain doctor --flight RUN_DIR` summarises the "
          "files. 0: none kept. docs/reliability.md.",
          at_least<I>(0)),
      row("dist.check_collectives", &C::dist, &DistConfig::check_collectives, "true",
          "Before each collective of the MPI communicator, the ranks check that they issue the same "
          "one (number, operation, dtype, bytes, gradient bucket), with one more small allreduce; a "
          "rank that differs ends the job with the flight recorder's message before any buffer is "
          "written. false saves that allreduce (well under 1 % of a step, docs/benchmarks.md) and lets "
          "MPI pair unlike collectives, which may hang, corrupt memory or crash. dist.backend=nccl "
          "does not check (docs/reliability.md)."),
      row("dist.backend", &C::dist, &DistConfig::backend, "auto",
          "Gradient communication: auto picks nccl for CUDA tensors when built with NCCL, else "
          "mpi (which carries CUDA tensors through host memory)."),
      row("dist.device", &C::dist, &DistConfig::device, "auto",
          "Where each rank computes: cuda uses the GPU of the rank's node-local rank (among "
          "CUDA_VISIBLE_DEVICES); auto picks cuda when libtorch sees a GPU, else cpu."),
      row("dist.allow_shared_gpu", &C::dist, &DistConfig::allow_shared_gpu, "false",
          "Allow more ranks on a node than visible GPUs (ranks share GPUs round-robin); "
          "otherwise that is an error."),

      row("ckpt.save_final", &C::ckpt, &CkptConfig::save_final, "true",
          "Write checkpoints/ckpt-<step>.h5 with the model when training ends."),

      row("ckpt.every_steps", &C::ckpt, &CkptConfig::every_steps, "0",
          "Write a checkpoint (model, optimizer, schedule, RNG, sampler position) every this "
          "many optimizer steps; 0 writes one only at the end and on a stop signal.",
          at_least<I>(0)),
      row("ckpt.every_minutes", &C::ckpt, &CkptConfig::every_minutes, "0",
          "Also write a checkpoint at the first step boundary this many minutes after the last "
          "one (rank 0's clock decides for all); 0 never by time.",
          at_least(0.0)),
      row("ckpt.keep_last", &C::ckpt, &CkptConfig::keep_last, "3",
          "Checkpoints kept in checkpoints/; older ones are deleted once a new one is in place. "
          "0 keeps all.",
          at_least<I>(0)),
      row("ckpt.keep_best", &C::ckpt, &CkptConfig::keep_best, "false",
          "After an evaluation with a new best test accuracy (a language model: lowest test loss), "
          "write a checkpoint, name it in "
          "checkpoints/best, and spare it from ckpt.keep_last's pruning."),
      row("ckpt.async", &C::ckpt, &CkptConfig::async, "false",
          "Copy the checkpoint to host memory at the step boundary and write it on a background "
          "thread while training continues (one write at a time; the next checkpoint and the end "
          "of the run wait for it). With dist.zero_stage > 0 every rank copies and writes its own "
          "part, the ranks' writers taking turns on a communicator of their own (MPI must provide "
          "MPI_THREAD_MULTIPLE)."),
      row("ckpt.write_timeout_s", &C::ckpt, &CkptConfig::write_timeout_s, "0",
          "Seconds rank 0 may spend writing one checkpoint (with ckpt.async: waiting for the "
          "background write at the next checkpoint or the end) before the job ends with exit "
          "code 5, naming the stuck write (a hung file system); 0 uses dist.timeout_s. Raise it "
          "for checkpoints that take longer than that to write. Timed by the rank watch, so "
          "only with two ranks or more.",
          zero_or_at_least(1.0)),
      row("ckpt.resume", &C::ckpt, &CkptConfig::resume, "auto",
          "auto: continue from the newest checkpoint in run.dir that verifies (falling back to "
          "the one before if it does not), or start fresh if there is none; none: start fresh; "
          "a path: continue from that checkpoint file.",
          Rule<ResumeFrom>{"non-empty", {}}),
      row("ckpt.allow_config_change", &C::ckpt, &CkptConfig::allow_config_change, "false",
          "Resume even when the config differs from the checkpoint's in more than run length, "
          "logging and checkpointing options."),
      row("ckpt.signals", &C::ckpt, &CkptConfig::signals, "USR1,TERM",
          "Signals that stop training at the next step boundary with a checkpoint and exit code "
          "75 (resumable); empty leaves the signals' default actions.",
          signal_list()),
      row("ckpt.check_every_steps", &C::ckpt, &CkptConfig::check_every_steps, "1",
          "Optimizer steps between the ranks' agreements on stop signals and ckpt.every_minutes "
          "(one allreduce of two numbers over MPI each time); raise it when steps are very short.",
          at_least<I>(1)),

      row("log.every_steps", &C::log, &LogConfig::every_steps, "50",
          "Progress line and metrics.jsonl record every this many steps.", at_least<I>(1)),
      row("log.level", &C::log, &LogConfig::level, "info", "Console and file log level."),
      row("log.all_ranks", &C::log, &LogConfig::all_ranks, "false",
          "Print INFO lines of every rank to the console, not only rank 0's."),
      row("log.tensorboard", &C::log, &LogConfig::tensorboard, "true",
          "Rank 0 also writes every metrics.jsonl number and the resolved config to a TensorBoard "
          "event file in <run.dir>/tensorboard/ (tensorboard --logdir RUN_DIR); a resumed run "
          "continues it. docs/monitoring.md."),
      row("log.trace_steps", &C::log, &LogConfig::trace_steps, "",
          "A-B: every rank writes a timeline of optimizer steps A to B (data wait, forward, "
          "backward, each bucket's reduction, the update, checkpoints, evaluation) to "
          "<run.dir>/trace/rank-<r>.json for Perfetto or chrome://tracing; `hpctrain trace merge "
          "RUN_DIR` joins the ranks. Empty: no timeline. docs/monitoring.md.",
          step_range()),
      row("log.profile_steps", &C::log, &LogConfig::profile_steps, "",
          "A-B: every rank times each libtorch operator of optimizer steps A to B with libtorch's "
          "profiler and writes its calls, self and total CPU milliseconds, most expensive first, to "
          "<run.dir>/profile/rank-<r>.tsv (the table torch.autograd.profiler's key_averages() gives "
          "in PyTorch). Profiled steps run slower. Empty: none. docs/monitoring.md.",
          step_range()),
  };
}

}  // namespace

StepRange parse_step_range(const std::string& text) {
  if (text.empty()) return {};
  const size_t dash = text.find('-');
  StepRange range;
  try {
    if (dash == std::string::npos) throw ConfigError("");
    range.first = parse_int(text.substr(0, dash));
    range.last = parse_int(text.substr(dash + 1));
  } catch (const ConfigError&) {
    throw ConfigError("'" + text + "' is not a step range A-B (e.g. 20-25)");
  }
  if (range.first < 1 || range.last < range.first) {
    throw ConfigError("'" + text + "' must be A-B with 1 <= A <= B");
  }
  return range;
}

const char* type_name(OptionType type) {
  switch (type) {
    case OptionType::kInt: return "int";
    case OptionType::kFloat: return "float";
    case OptionType::kString: return "string";
    case OptionType::kBool: return "bool";
  }
  return "?";
}

const std::vector<Option>& option_table() {
  static const std::vector<Option> table = build_table();
  return table;
}

const Option* find_option(const std::string& name) {
  for (const auto& option : option_table()) {
    if (option.name == name) return &option;
  }
  return nullptr;
}

std::vector<std::string> sections() {
  std::vector<std::string> out;
  for (const auto& option : option_table()) {
    if (out.empty() || out.back() != option.section()) out.push_back(option.section());
  }
  return out;
}

}  // namespace hpctrain::config
