// The resolved configuration as plain typed structs, one per INI section. Filled only through the
// option table (option_table.h), which owns every name, default, help text and check.
// Options that are choices are enums; their names, in the order --help lists them, are in
// Choices<E> (the option table parses and prints them; name_of() gives one for a message).
// Depends on std only, so every module may take a section by const reference.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hpctrain::config {

enum class DataIo { kMmap, kPosix, kMpio };
enum class ModelName { kFashionCnn, kMlp, kResnet, kGpt, kLlama, kUnet, kTorchscript };
enum class InitNames { kAuto, kHpctrain, kHfGpt2 };
enum class GptActivation { kGelu, kGeluTanh, kAuto };
enum class LoraBaseDtype { kFloat32, kBf16 };
enum class OptimizerName { kAdamW, kSgd };
enum class LrScaling { kNone, kLinear, kSqrt };
enum class Schedule { kConstant, kStep, kCosine };
enum class Precision { kFp32, kBf16, kFp16 };
enum class LossScale { kAuto, kDynamic, kNone };
enum class Nonfinite { kSkip, kAbort };
enum class Objective { kCrossEntropy, kDiffusion };
enum class NoiseSchedule { kLinear, kCosine };
enum class GradCompression { kNone, kFp16, kBf16 };
enum class Backend { kAuto, kMpi, kNccl };
enum class DeviceKind { kAuto, kCpu, kCuda };
enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError };

// Each enum's names, indexed by its values.
template <typename E>
struct Choices;
#define HT_CHOICES(E, ...)                                                  \
  template <>                                                               \
  struct Choices<E> {                                                       \
    static constexpr std::array names{__VA_ARGS__};                         \
  }
HT_CHOICES(DataIo, "mmap", "posix", "mpio");
HT_CHOICES(ModelName, "fashion_cnn", "mlp", "resnet", "gpt", "llama", "unet", "torchscript");
HT_CHOICES(InitNames, "auto", "hpctrain", "hf-gpt2");
HT_CHOICES(GptActivation, "gelu", "gelu_tanh", "auto");
HT_CHOICES(LoraBaseDtype, "float32", "bf16");
HT_CHOICES(OptimizerName, "adamw", "sgd");
HT_CHOICES(LrScaling, "none", "linear", "sqrt");
HT_CHOICES(Schedule, "constant", "step", "cosine");
HT_CHOICES(Precision, "fp32", "bf16", "fp16");
HT_CHOICES(LossScale, "auto", "dynamic", "none");
HT_CHOICES(Nonfinite, "skip", "abort");
HT_CHOICES(Objective, "cross_entropy", "diffusion");
HT_CHOICES(NoiseSchedule, "linear", "cosine");
HT_CHOICES(GradCompression, "none", "fp16", "bf16");
HT_CHOICES(Backend, "auto", "mpi", "nccl");
HT_CHOICES(DeviceKind, "auto", "cpu", "cuda");
HT_CHOICES(LogLevel, "trace", "debug", "info", "warn", "error");
#undef HT_CHOICES

// "bf16" for Precision::kBf16.
template <typename E>
const char* name_of(E value) {
  return Choices<E>::names[static_cast<std::size_t>(value)];
}

// The value named `text`; false when no value has that name.
template <typename E>
bool parse_choice(const std::string& text, E& value) {
  for (std::size_t i = 0; i < Choices<E>::names.size(); ++i) {
    if (text == Choices<E>::names[i]) {
      value = static_cast<E>(i);
      return true;
    }
  }
  return false;
}

// "fp32|bf16|fp16".
template <typename E>
std::string choice_list() {
  std::string out;
  for (const char* name : Choices<E>::names) out += (out.empty() ? "" : "|") + std::string(name);
  return out;
}

// ckpt.resume: the newest checkpoint of run.dir (auto), none, or a file.
struct ResumeFrom {
  enum class Kind { kAuto, kNone, kPath };
  Kind kind = Kind::kAuto;
  std::string path;  // of kPath

  // As the option is written: "auto", "none" or the path.
  std::string text() const { return kind == Kind::kAuto ? "auto" : kind == Kind::kNone ? "none" : path; }
};

struct RunConfig {
  std::string dir;  // run directory: config.ini, logs/, metrics.jsonl, checkpoints/
  double lock_stale_s = 30;  // a lock without a heartbeat this long, held on another host, is a dead job's
};

struct DataConfig {
  std::string path;  // dataset directory written by `hpctrain prepare`
  std::string train_split;
  std::string eval_split;
  std::int64_t prefetch = 0;  // batches read ahead; 0: read in the training thread
  std::int64_t loader_threads = 1;  // threads reading ahead (with prefetch >= 1)
  DataIo io = DataIo::kMmap;  // how a sample split is read
  std::int64_t cache_mb = 0;  // memory per split and rank for blocks read from its shards
  std::int64_t shuffle_window_mb = 0;  // 0: global shuffle; N: shuffle by chunks, N MiB at a time
  std::int64_t random_crop = 0;  // zero padding of the random crop; 0: off
  bool random_flip = false;
};

struct ModelConfig {
  ModelName name = ModelName::kFashionCnn;
  std::string mlp_hidden;  // comma-separated hidden widths of the mlp model
  double dropout = 0.0;
  std::int64_t resnet_depth = 20;  // 6n+2
  std::int64_t resnet_width = 16;  // channels of the first stage
  std::int64_t gpt_layers = 4;
  std::int64_t gpt_heads = 4;
  std::int64_t gpt_embd = 128;
  std::int64_t gpt_block_size = 128;  // tokens per window (context length)
  GptActivation gpt_activation = GptActivation::kGelu;
  std::int64_t unet_channels = 32;    // the unet's first level's channels
  std::string unet_mults = "1,2,2";   // comma-separated channel multipliers, one per level
  bool unet_attention = false;        // self-attention at the unet's lowest resolution
  bool unet_class_cond = true;        // a class embedding (classifier-free guidance)
  double cond_drop = 0.1;             // probability a training sample's class is dropped
  bool activation_checkpointing = false;  // recompute each gpt or llama block in backward
  std::string path;                   // the TorchScript file of model.name=torchscript
  std::string hf_config;              // model.name=llama's config.json; "": model.init_from's
  std::string init_from;              // weights to start from; "": random
  InitNames init_names = InitNames::kAuto;
  bool init_strict = true;
  std::int64_t lora_rank = 0;  // LoRA adapters' rank r (model/lora.h); 0: none
  double lora_alpha = 8.0;     // their update is scaled by alpha / r
  double lora_dropout = 0.0;
  std::string lora_targets = "attn";  // comma-separated gpt layers
  std::string lora_train;             // base parameters that train too: bias, norm
  LoraBaseDtype lora_base_dtype = LoraBaseDtype::kFloat32;  // of the frozen base's matrices
};

struct OptimConfig {
  OptimizerName name = OptimizerName::kAdamW;
  double lr = 0.0;
  double weight_decay = 0.0;
  double momentum = 0.0;
  double beta1 = 0.0;
  double beta2 = 0.0;
  double eps = 0.0;
  bool nesterov = false;           // sgd
  bool decay_bias_and_norm = true;  // weight decay on one-dimensional parameters too
  bool fused = true;               // adamw: multi-tensor kernels (optim/multi_tensor_adamw.h)
  double clip_grad_norm = 0.0;     // 0: no clipping
  LrScaling lr_scaling = LrScaling::kNone;  // relative to base_batch
  std::int64_t base_batch = 0;     // the global batch optim.lr was tuned for
  Schedule schedule = Schedule::kConstant;
  std::int64_t step_every = 0;     // step schedule: steps between drops
  double step_gamma = 0.1;         // step schedule: factor per drop
  std::int64_t warmup_steps = 0;  // linear warmup from lr/warmup_steps to lr
  std::int64_t decay_steps = 0;   // cosine length; 0: the run's (max_steps or epochs)
};

struct TrainConfig {
  std::int64_t epochs = 0;
  std::int64_t max_steps = 0;  // 0: no limit
  std::int64_t batch_size = 0;  // per rank
  std::int64_t eval_batch_size = 0;
  std::int64_t eval_every = 0;  // optimizer steps between evaluations; 0: at epoch ends only
  std::int64_t seed = 0;
  std::int64_t threads = 0;  // intra-op threads per rank; 0: the cores this rank is bound to
  std::int64_t accum_steps = 1;  // micro-batches per optimizer step
  std::int64_t global_batch = 0;  // when set, accum_steps follows from it and the world size
  Objective objective = Objective::kCrossEntropy;
  double label_smoothing = 0.0;
  double ema_decay = 0.0;  // a moving average of the weights; 0: none
  Precision precision = Precision::kFp32;  // autocast in the forward pass
  LossScale loss_scale = LossScale::kAuto;  // auto: dynamic with fp16
  double loss_scale_init = 65536.0;
  Nonfinite nonfinite = Nonfinite::kSkip;  // a step whose gradients hold inf or NaN
  std::int64_t max_skipped = 20;  // skipped steps in a row before the run stops
  double peak_tflops = 0.0;  // one device's peak, for MFU; 0: a known GPU's, or none
  bool tf32 = true;              // CUDA float32 products and convolutions on TF32 tensor cores
  bool cudnn_benchmark = false;  // cuDNN picks convolution algorithms by timing them
  bool cuda_graphs = false;      // forward+backward replayed from a CUDA graph (train/graphed_gradients.h)
  bool shuffle = true;
  bool drop_last = false;
};

struct DiffusionConfig {
  std::int64_t steps = 1000;  // noise levels T of the forward process
  NoiseSchedule schedule = NoiseSchedule::kLinear;
};

struct DistConfig {
  Backend backend = Backend::kAuto;
  double bucket_mb = 0.0;  // gradient bucket size
  bool overlap = true;     // reduce buckets during backward
  std::int64_t zero_stage = 0;  // 0 replicated; 1 optimizer state sharded; 2 and gradients; 3 and parameters
  GradCompression grad_compression = GradCompression::kNone;  // the dtype buckets travel in
  bool sync_bn = false;          // BatchNorm statistics over all ranks
  double timeout_s = 0.0;  // a collective taking longer ends the job
  std::int64_t check_replicas_every = 0;  // steps between parameter fingerprint checks; 0: never
  DeviceKind device = DeviceKind::kAuto;
  bool allow_shared_gpu = false;  // more ranks on a node than visible GPUs: share them round-robin
  std::int64_t flight_records = 0;  // collectives each rank remembers for a hang's dump; 0: none
  bool check_collectives = true;    // the ranks agree on each collective before it runs (MPI)
};

struct CkptConfig {
  bool save_final = true;
  std::int64_t every_steps = 0;  // 0: no periodic checkpoints
  double every_minutes = 0.0;    // 0: none by time
  std::int64_t keep_last = 0;    // checkpoints kept; 0: all
  bool keep_best = false;        // checkpoint each new best evaluation and never prune it
  bool async = false;            // write on a background thread from a host copy
  double write_timeout_s = 0.0;  // a write taking longer ends the job; 0: dist.timeout_s
  ResumeFrom resume;
  bool allow_config_change = false;
  std::string signals;  // comma-separated signal names that stop the run with a checkpoint
  std::int64_t check_every_steps = 1;  // steps between the ranks' agreements on signals and time
};

struct LogConfig {
  std::int64_t every_steps = 0;
  LogLevel level = LogLevel::kInfo;
  bool all_ranks = false;
  bool tensorboard = true;  // <run.dir>/tensorboard/events.out.tfevents.*
  std::string trace_steps;  // "A-B": each rank's timeline of steps A..B in <run.dir>/trace/
  std::string profile_steps;  // "A-B": each rank's operator times over steps A..B in <run.dir>/profile/
};

// Optimizer steps first..last, inclusive, counted from 1; {0, 0} is none.
struct StepRange {
  std::int64_t first = 0;
  std::int64_t last = 0;
  bool empty() const { return last == 0; }
};
// "A-B" (1 <= A <= B) or "" as a StepRange; throws ConfigError saying what is wrong.
StepRange parse_step_range(const std::string& text);

struct Config {
  RunConfig run;
  DataConfig data;
  ModelConfig model;
  OptimConfig optim;
  TrainConfig train;
  DiffusionConfig diffusion;
  DistConfig dist;
  CkptConfig ckpt;
  LogConfig log;
};

}  // namespace hpctrain::config
