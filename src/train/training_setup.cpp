// Everything a run checks and loads before MPI starts (TrainingSetup): threads, seed, the
// dataset (samples or a token stream) and the model that fits it, so a bad config or dataset stops
// every rank the same way before anything is written.
#include <torch/torch.h>

#include <algorithm>
#include <optional>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/data/manifest.h"
#include "hpctrain/model/model.h"
#include "hpctrain/runtime/checkpoint_room.h"
#include "hpctrain/runtime/device.h"
#include "hpctrain/runtime/global_batch.h"
#include "hpctrain/sharding/strategy.h"
#include "hpctrain/train/objective.h"
#include "hpctrain/train/option_checks.h"
#include "hpctrain/train/trainer.h"
#include "hpctrain/weights/init_from.h"
#include "hpctrain/weights/weight_file.h"

namespace hpctrain::train {

int configure_threads(const config::TrainConfig& train) {
  const int threads = train.threads > 0 ? static_cast<int>(train.threads) : sys::affinity_cores();
  at::set_num_threads(threads);
  return threads;
}

namespace {

// The gpt and llama models learn from a token stream; a TorchScript module from either (its dry-run forward
// checks that it fits); every other model from samples with labels.
void check_model_fits_dataset(const config::Config& config, const data::Manifest& manifest, bool token_stream) {
  if (config.model.name == config::ModelName::kTorchscript) return;
  const bool language_model =
      config.model.name == config::ModelName::kGpt || config.model.name == config::ModelName::kLlama;
  if (language_model && !token_stream) {
    const data::FieldSpec& field = manifest.fields.front();
    throw ConfigError(std::string("model.name=") + config::name_of(config.model.name) + " learns from a token stream (`hpctrain prepare text`), but dataset " +
                      config.data.path + " holds samples ('" + field.name + "' " + io::dtype_name(field.dtype) +
                      io::shape_text(field.shape) + ") with labels; choose a classifier (mlp, fashion_cnn, "
                      "resnet) or a token-stream dataset");
  }
  if (!language_model && token_stream) {
    throw ConfigError("dataset " + config.data.path + " is a token stream, which only model.name=gpt, llama and "
                      "torchscript (a scripted language model) learn from; model.name=" +
                      config::name_of(config.model.name) + " learns from samples");
  }
}

void check_augmentation(const config::Config& config, const std::vector<std::int64_t>& shape, bool token_stream) {
  if (config.data.random_crop == 0 && !config.data.random_flip) return;
  const bool channels_first_image =
      shape.size() == 2 || (shape.size() == 3 && (shape[0] == 1 || shape[0] == 3 || shape[0] == 4));
  if (token_stream) {
    throw ConfigError("data.random_crop and data.random_flip augment images; dataset " + config.data.path +
                      " is a token stream: turn them off");
  }
  if (!channels_first_image) {
    std::string dims;
    for (const std::int64_t d : shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    throw ConfigError("data.random_crop and data.random_flip augment images stored channels first ([C, H, W] "
                      "with C = 1, 3 or 4, or [H, W]), but dataset " + config.data.path + " holds samples of shape [" +
                      dims + "]; turn them off (or store images as [C, H, W])");
  }
}

// A token stream's split, in windows of model.gpt_block_size + 1 tokens.
data::TokenStream load_token_split(const config::Config& config, const std::string& split, std::int64_t cache_bytes) {
  data::TokenStream stream = data::TokenStream::load(config.data.path, split, config.model.gpt_block_size, cache_bytes);
  if (stream.size() < config.model.gpt_block_size + 1) {
    throw DataError("split '" + split + "' of " + config.data.path + " has " + std::to_string(stream.size()) +
                    " tokens, fewer than one window of model.gpt_block_size + 1 = " +
                    std::to_string(config.model.gpt_block_size + 1) + "; lower model.gpt_block_size");
  }
  return stream;
}

}  // namespace

namespace {

// A micro-batch larger than a rank's share of the split would be padded up to train.batch_size,
// and its memory taken, for nothing: an epoch is one step either way.
void check_batch_fits_share(const data::Source& train_split, const config::TrainConfig& train, int world_size) {
  const std::int64_t share = (train_split.items() + world_size - 1) / world_size;
  if (train.batch_size <= share) return;
  const char* items = train_split.language_model() ? "windows" : "samples";
  throw ConfigError("train.batch_size=" + std::to_string(train.batch_size) + " is larger than a rank's share of " +
                    "the training split (" + std::to_string(share) + " of its " + std::to_string(train_split.items()) +
                    " " + items + " at " + std::to_string(world_size) + " rank(s)); lower train.batch_size to " +
                    std::to_string(share) + " or less");
}

}  // namespace

void check_world_fits(const TrainingSetup& setup, int world_size) {
  const config::TrainConfig& train = setup.config.train;
  runtime::accumulation_steps(train, world_size);
  if (!setup.train) return;
  const std::int64_t global_batch = world_size * train.batch_size;
  if (!setup.train->language_model() && train.drop_last && setup.train->items() < global_batch) {
    throw ConfigError("train.drop_last: a global batch of " + std::to_string(global_batch) + " (" +
                      std::to_string(world_size) + " ranks x train.batch_size " + std::to_string(train.batch_size) +
                      ") is larger than the split's " + std::to_string(setup.train->items()) +
                      " samples, so no step would run; lower train.batch_size or set train.drop_last=false");
  }
  check_batch_fits_share(*setup.train, train, world_size);
}

namespace {

// model.init_from, read and mapped onto the model's names; a gpt's shape options given as 0 are
// filled from it.
struct InitialWeights {
  weights::WeightFile file;  // the mapped tensors may view its memory
  weights::MappedWeights mapped;
  std::int64_t vocabulary = 0;  // a gpt's token embedding rows
};

bool shape_from_weights(const config::ModelConfig& model) {
  return model.gpt_layers == 0 || model.gpt_embd == 0 || model.gpt_block_size == 0;
}

// model.gpt_activation=auto follows the names of model.init_from's weights.
bool activation_from_weights(const config::ModelConfig& model) {
  return model.name == config::ModelName::kGpt && model.gpt_activation == config::GptActivation::kAuto;
}

// Evaluation takes its weights from a checkpoint: the file is read only for a shape or an
// activation left to it.
std::optional<InitialWeights> read_initial_weights(config::ModelConfig& model, bool training) {
  if (model.init_from.empty() && shape_from_weights(model)) {
    throw ConfigError("model.gpt_layers, model.gpt_embd and model.gpt_block_size take 0 only with model.init_from "
                      "(the value then comes from its weights); give each a size");
  }
  if (model.init_from.empty()) weights::resolve_gpt_activation(model, config::InitNames::kHpctrain);
  if (model.init_from.empty() || (!training && !shape_from_weights(model) && !activation_from_weights(model))) {
    return std::nullopt;
  }
  InitialWeights initial{weights::WeightFile::open(model.init_from), {}, 0};
  initial.mapped = weights::map_weights(model, initial.file);
  weights::resolve_gpt_activation(model, initial.mapped.names);
  if (model.name == config::ModelName::kGpt) weights::fill_gpt_shape(model, initial.mapped.tensors, initial.vocabulary);
  if (shape_from_weights(model)) {
    throw ConfigError("model.gpt_layers, model.gpt_embd and model.gpt_block_size take 0 from model.init_from only "
                      "for model.name=gpt; give each a size");
  }
  return initial;
}

// A language model's weights only fit data tokenized as they were trained.
void check_vocabulary(const config::Config& config, const InitialWeights& initial, const data::Manifest& manifest) {
  if (initial.vocabulary == 0 || initial.vocabulary == manifest.num_classes) return;
  // A Hugging Face model's embedding often has rows past its tokenizer's ids (Qwen's 151,936 for
  // 151,669): the data's ids only have to fit.
  if (manifest.tokenizer.name == "hf" && manifest.num_classes < initial.vocabulary) return;
  throw ConfigError("model.init_from=" + config.model.init_from + " has a vocabulary of " +
                    std::to_string(initial.vocabulary) + " tokens, but data.path=" + config.data.path +
                    " was tokenized into " + std::to_string(manifest.num_classes) +
                    ": prepare the text with the weights' tokenizer");
}

// The model; sharded (dist.zero_stage 1 to 3), with its large buffers mapped
// (sys::LargeAllocationsMapped): stage 3 frees them once cut into shards, and at every stage the
// heap is left to a step's temporaries.
std::shared_ptr<model::Model> build_model(const config::Config& config, const model::ModelSpec& spec) {
  const sys::LargeAllocationsMapped mapped(sharding::Strategy(config.dist).shards_state());
  return model::make_model(config.model, spec);
}


// Stage 3 of a llama whose every weight comes from model.init_from: each rank copies only its
// shard of the weights from the file (model.h, ModelSpec::parameters_without_memory).
bool weights_read_by_shard(const config::Config& config) {
  const config::ModelConfig& m = config.model;
  return sharding::Strategy(config.dist).shards_parameters() && m.name == config::ModelName::kLlama &&
         !m.init_from.empty() && m.init_strict && m.lora_rank == 0;
}

// A token stream's splits, and the language model that reads them.
void load_token_stream(const data::Manifest& manifest, bool need_train_split, TrainingSetup& setup) {
  const config::Config& config = setup.config;
  if (config.data.shuffle_window_mb > 0) {
    throw ConfigError("data.shuffle_window_mb shuffles the samples of a sample dataset; " + config.data.path +
                      " is a token stream, read in windows at random offsets: set it to 0");
  }
  check_augmentation(config, {}, true);
  const std::int64_t cache_bytes = config.data.cache_mb << 20;
  if (need_train_split) {
    setup.train = data::token_source(load_token_split(config, config.data.train_split, cache_bytes),
                                     data::source_options(config, config.data.train_split, setup.use_cuda));
  }
  if (!config.data.eval_split.empty()) {
    setup.eval = data::token_source(load_token_split(config, config.data.eval_split, cache_bytes),
                                    data::source_options(config, config.data.eval_split, false));
  }
  HT_CHECK(setup.train || setup.eval, "nothing to load: no train split and no eval split");
  // The vocabulary is the manifest's num_classes (256 for `prepare text`'s bytes).
  model::ModelSpec spec{{config.model.gpt_block_size}, manifest.num_classes, true};
  spec.parameters_without_memory = need_train_split && weights_read_by_shard(config);
  setup.rss_before_model = sys::current_rss_bytes();
  setup.model = build_model(config, spec);
}

// The splits of samples with labels, and the classifier that fits them.
void load_sample_splits(bool need_train_split, TrainingSetup& setup) {
  const config::Config& config = setup.config;
  const std::int64_t cache_bytes = config.data.cache_mb << 20;
  const data::ShardAccess access = data::shard_access(config.data.io);
  std::optional<data::Split> train;
  std::optional<data::Split> eval;
  if (need_train_split) train = data::Split::load(config.data.path, config.data.train_split, cache_bytes, access);
  if (!config.data.eval_split.empty()) {
    eval = data::Split::load(config.data.path, config.data.eval_split, cache_bytes, access);
  }
  for (const auto* split : {&train, &eval}) {
    if (*split && !(*split)->why_not_mapped().empty()) {
      log::info("data.io=mmap does not apply: {}; the split is read into memory", (*split)->why_not_mapped());
    }
  }
  HT_CHECK(train || eval, "nothing to load: no train split and no eval split");
  const data::Split& any = train ? *train : *eval;
  check_augmentation(config, any.sample_shape(), false);
  setup.rss_before_model = sys::current_rss_bytes();
  setup.model = build_model(config, {any.sample_shape(), any.manifest().num_classes});
  if (train) {
    setup.train = data::sample_source(*train, data::source_options(config, config.data.train_split, setup.use_cuda));
  }
  if (eval) setup.eval = data::sample_source(*eval, data::source_options(config, config.data.eval_split, false));
}

}  // namespace

TrainingSetup prepare_training(const config::Config& given, bool need_train_split) {
  config::Config config = given;
  const std::optional<InitialWeights> initial = read_initial_weights(config.model, need_train_split);
  const bool use_cuda = runtime::resolve_use_cuda(config.dist.device, runtime::visible_gpus());
  check_options(config, {use_cuda, std::max(1, comm::Bootstrap::launcher_world_size()), need_train_split});
  const int threads = configure_threads(config.train);
  runtime::set_cuda_math(config.train.tf32, config.train.cudnn_benchmark);
  // Same seed everywhere: every rank builds identical initial weights (rank 0's are broadcast
  // anyway, so a rank with a different libtorch still starts from the same point).
  torch::manual_seed(static_cast<std::uint64_t>(config.train.seed));
  const data::Manifest manifest = data::Manifest::load(config.data.path);
  const bool token_stream = data::is_token_stream(manifest);
  check_model_fits_dataset(config, manifest, token_stream);
  TrainingSetup setup{config, nullptr, nullptr, nullptr, threads, use_cuda};
  if (token_stream) {
    load_token_stream(manifest, need_train_split, setup);
  } else {
    load_sample_splits(need_train_split, setup);
  }
  if (initial && need_train_split) {
    check_vocabulary(config, *initial, manifest);
    weights::load_weights(*setup.model, initial->mapped, config.model.init_strict, config.model.init_from);
    model::DeferredWeights& deferred = setup.model->deferred_weights();
    deferred.keep_alive = initial->file.mapping();
    deferred.mapped = initial->file.format() == weights::WeightFormat::kHfDirectory ||
                      initial->file.format() == weights::WeightFormat::kSafetensors;
  }
  check_model_options(config, *setup.model);
  setup.checkpoint_bytes = runtime::checkpoint_bytes_estimate(config, *setup.model);
  return setup;
}

}  // namespace hpctrain::train
