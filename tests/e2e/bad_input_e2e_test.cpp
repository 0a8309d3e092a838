// A sweep of malformed inputs through the real executable: configs, datasets and checkpoints that
// are wrong in one way each, one table row per input. Every row must end with its documented exit
// code (docs/exit-codes.md), print exactly one `hpctrain: error:` line that says what is wrong and
// where, and write nothing it should not: no run directory where the error comes before training
// starts, no checkpoint where a data error stops training, and a run directory it would have
// resumed byte for byte as it was (logs/ aside).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "e2e.h"
#include "process.h"
#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/core/system.h"

namespace hpctrain::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kErrorTag = "hpctrain: error:";

// The training command of most rows: resumable from the suite's run (the same config, two more
// steps), so a row changes one thing only.
const std::string kTrain =
    "{bin} train --config {configs}/fashion_cnn.ini --data.path={data} --run.dir={run} --train.threads=1"
    " --train.max_steps=4 --data.eval_split=";

// Where a row runs: its own directory, and the dataset, run directory and intact checkpoint its
// command and damage use.
struct Env {
  std::string dir;
  std::string data;
  std::string run;
  std::string checkpoint;
};

using Damage = std::function<void(const Env&)>;

// What a row copies into its directory before damaging it: the suite's dataset (as {data}) or
// its run directory with a checkpoint (as {run}).
enum class Copy { kNothing, kDataset, kRun };

// What the failed command may leave at {run}: nothing at all; a run that started but holds no
// checkpoint; or the copied run directory unchanged but for logs/.
enum class RunDir { kNotCreated, kNoCheckpoint, kUnchanged };

struct Case {
  std::string name;
  Copy copy;
  Damage damage;
  int ranks;  // 1: the executable alone, without mpirun
  std::string command;
  int code;
  std::vector<std::string> fragments;  // each on the error line, placeholders expanded
  RunDir run_dir;
};

// The damage helpers throw this; the row then fails without running its command.
void require(bool condition, const std::string& message) {
  if (!condition) throw std::runtime_error("damaging the input failed: " + message);
}

std::string read_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_binary(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void replace_all(std::string& text, const std::string& key, const std::string& value) {
  for (size_t pos = text.find(key); pos != std::string::npos; pos = text.find(key, pos + value.size())) {
    text.replace(pos, key.size(), value);
  }
}

// A directory tree as path -> contents (directories as "path/" -> ""), without logs/.
using Tree = std::map<std::string, std::string>;

Tree snapshot(const std::string& root) {
  Tree tree;
  if (!fs::exists(root)) return tree;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string relative = it->path().lexically_relative(root).string();
    if (relative == "logs") {
      it.disable_recursion_pending();
    } else if (it->is_directory()) {
      tree[relative + "/"] = "";
    } else {
      tree[relative] = read_binary(it->path().string());
    }
  }
  return tree;
}

// The entries that were removed, added or changed; "" when none.
std::string changes(const Tree& before, const Tree& after) {
  std::string out;
  for (const auto& entry : before) {
    const auto found = after.find(entry.first);
    if (found == after.end()) {
      out += " removed " + entry.first + ";";
    } else if (found->second != entry.second) {
      out += " changed " + entry.first + ";";
    }
  }
  for (const auto& entry : after) {
    if (before.count(entry.first) == 0) out += " added " + entry.first + ";";
  }
  return out;
}

std::string error_line(const std::string& err) {
  const size_t tag = err.find(kErrorTag);
  if (tag == std::string::npos) return "";
  const size_t newline = err.rfind('\n', tag);
  const size_t begin = newline == std::string::npos ? 0 : newline + 1;
  return err.substr(begin, err.find('\n', tag) - begin);
}

void flip_byte(const std::string& path, size_t offset) {
  std::string bytes = read_binary(path);
  require(offset < bytes.size(), path + " is shorter than " + std::to_string(offset) + " bytes");
  bytes[offset] = static_cast<char>(~bytes[offset]);
  write_binary(path, bytes);
}

// Flips a byte in the middle of one tensor's stored data, found by its bytes, so that exactly
// that tensor fails its checksum.
void flip_tensor_byte(const std::string& path, const std::string& group, const std::string& name) {
  std::string needle;
  {
    const ckpt::NamedTensors tensors = ckpt::CheckpointReader(path).read_group(group);
    for (const auto& [stored, tensor] : tensors) {
      if (stored != name) continue;
      const at::Tensor flat = tensor.contiguous();
      const char* data = static_cast<const char*>(flat.data_ptr());
      needle.assign(data + flat.nbytes() / 2, 64);
    }
  }
  require(needle.size() == 64, group + "/" + name + " is not in " + path);
  const std::string bytes = read_binary(path);
  const size_t offset = bytes.find(needle);
  require(offset != std::string::npos, group + "/" + name + " is not stored as is in " + path);
  require(bytes.find(needle, offset + 1) == std::string::npos, "the bytes of " + name + " are not unique");
  flip_byte(path, offset + 7);
}

// Writes the checkpoint again, everything as it was but format_version 3. (A patch of the bytes
// would not do: the file format checksums its metadata, so the attribute would read as damage.)
void write_future_format_version(const std::string& path) {
  ckpt::Checkpoint future;
  {
    const ckpt::CheckpointReader reader(path);
    future.meta = reader.meta();
    for (const char* group : ckpt::kGroups) {
      if (reader.has_group(group)) future.groups[group] = reader.read_group(group);
    }
  }
  future.meta.format_version = 3;
  const std::string scratch = path + ".future";
  fs::create_directories(scratch);
  fs::rename(ckpt::write_checkpoint(scratch, future), path);
  sys::remove_tree(scratch);
  std::string refusal;
  try {
    ckpt::CheckpointReader reader(path);
  } catch (const std::exception& e) {
    refusal = e.what();
  }
  require(refusal.find("format version 3") != std::string::npos, "the rewritten file reads as: '" + refusal + "'");
}

// --- the damage a row does ------------------------------------------------------------------------

// Writes a TorchScript module (tests/support/export_torchscript.py `flags`) to `relative`.
Damage export_module(const std::string& relative, const std::string& flags) {
  return [=](const Env& env) {
    const ProcessResult exported = run_command("/usr/bin/python3 " + kSource + "/tests/support/export_torchscript.py " +
                                               env.dir + "/" + relative + " " + flags);
    require(exported.exit_code == 0, "export_torchscript.py " + flags + " failed: " + exported.err);
  };
}

// Writes `text` to `relative` (under the row's directory).
Damage write_file(const std::string& relative, const std::string& text) {
  return [=](const Env& env) { write_binary(env.dir + "/" + relative, text); };
}

Damage write_data_file(const std::string& file, const std::string& text) {
  return [=](const Env& env) { write_binary(env.data + "/" + file, text); };
}

Damage remove_data_file(const std::string& file) {
  return [=](const Env& env) { require(fs::remove(env.data + "/" + file), file + " was not there"); };
}

Damage truncate_data_file(const std::string& file) {
  return [=](const Env& env) {
    const std::string path = env.data + "/" + file;
    fs::resize_file(path, fs::file_size(path) / 2);
  };
}

// A byte in the middle of the shard: its image data.
Damage flip_data_file(const std::string& file) {
  return [=](const Env& env) {
    const std::string path = env.data + "/" + file;
    flip_byte(path, fs::file_size(path) / 2);
  };
}

// Sets the manifest's value at a JSON pointer (an array index one past the end appends).
Damage set_manifest(const std::string& pointer, const std::string& value) {
  return [=](const Env& env) {
    const std::string path = env.data + "/manifest.json";
    json manifest = json::parse(read_file(path));
    manifest[json::json_pointer(pointer)] = json::parse(value);
    write_binary(path, manifest.dump(2));
  };
}

Damage erase_manifest(const std::string& key) {
  return [=](const Env& env) {
    const std::string path = env.data + "/manifest.json";
    json manifest = json::parse(read_file(path));
    require(manifest.erase(key) == 1, "the manifest has no " + key);
    write_binary(path, manifest.dump(2));
  };
}

enum class Harm { kNotHdf5, kEmpty, kTruncate, kFlipModel, kFlipOptim, kFutureVersion };

void harm_checkpoint(const std::string& path, Harm harm) {
  switch (harm) {
    case Harm::kNotHdf5:
      write_binary(path, "not a checkpoint\n");
      break;
    case Harm::kEmpty:
      write_binary(path, "");
      break;
    case Harm::kTruncate:
      fs::resize_file(path, fs::file_size(path) / 2);
      break;
    case Harm::kFlipModel:
      flip_tensor_byte(path, "model", "fc1.weight");
      break;
    case Harm::kFlipOptim:
      flip_tensor_byte(path, "optim", "conv2.weight/exp_avg");
      break;
    case Harm::kFutureVersion:
      write_future_format_version(path);
      break;
  }
}

// The newest checkpoint of the copied run, the one ckpt.resume=auto takes.
Damage harm_latest(Harm harm) {
  return [=](const Env& env) {
    const std::string latest = ckpt::latest_checkpoint(env.run + "/checkpoints");
    require(!latest.empty(), env.run + " has no checkpoint");
    harm_checkpoint(latest, harm);
  };
}

// A copy of the suite's checkpoint at {case}/bad.h5.
Damage harm_copy(Harm harm) {
  return [=](const Env& env) {
    fs::copy_file(env.checkpoint, env.dir + "/bad.h5");
    harm_checkpoint(env.dir + "/bad.h5", harm);
  };
}

// --- the rows -----------------------------------------------------------------------------------
// Placeholders: {train} (kTrain), {bin}, {configs}, {case} (the row's directory), {data}, {run},
// {tokens} (a token-stream dataset), {mlp} (a checkpoint of the mlp model).

std::vector<Case> config_cases() {
  return {
      {"UnknownKeyInAnIniFile", Copy::kNothing, write_file("bad.ini", "[train]\nbatch_sise = 64\n"),
       1, "{train} --config {case}/bad.ini", 2,
       {"{case}/bad.ini: unknown option 'train.batch_sise' (did you mean 'train.batch_size'?)"}, RunDir::kNotCreated},
      {"UnknownOptionOnTheCommandLine", Copy::kNothing, nullptr,
       1, "{train} --train.batch_sise=3", 2,
       {"command line: unknown option '--train.batch_sise=3' (did you mean 'train.batch_size'?)"}, RunDir::kNotCreated},
      {"IntegerGivenLetters", Copy::kNothing, nullptr,
       1, "{train} --train.batch_size=abc", 2, {"train.batch_size: 'abc' is not an integer"}, RunDir::kNotCreated},
      {"BooleanGivenMaybe", Copy::kNothing, nullptr,
       1, "{train} --train.shuffle=maybe", 2, {"train.shuffle: 'maybe' is not a boolean"}, RunDir::kNotCreated},
      {"FloatGivenAnExponentWithoutDigits", Copy::kNothing, nullptr,
       1, "{train} --optim.lr=1e", 2, {"optim.lr: '1e' is not a finite number"}, RunDir::kNotCreated},
      {"WrongTypeInAnIniFile", Copy::kNothing, write_file("bad.ini", "[train]\nepochs = two\n"),
       1, "{train} --config {case}/bad.ini", 2,
       {"{case}/bad.ini: train.epochs: 'two' is not an integer"}, RunDir::kNotCreated},
      {"ZeroBatchSize", Copy::kNothing, nullptr,
       1, "{train} --train.batch_size=0", 2, {"train.batch_size: '0' must be >= 1"}, RunDir::kNotCreated},
      {"NegativeLearningRate", Copy::kNothing, nullptr,
       1, "{train} --optim.lr=-1", 2, {"optim.lr: '-1' must be > 0"}, RunDir::kNotCreated},
      {"NegativePrefetch", Copy::kNothing, nullptr,
       1, "{train} --data.prefetch=-1", 2, {"data.prefetch: '-1' must be >= 0"}, RunDir::kNotCreated},
      {"LabelSmoothingAboveOne", Copy::kNothing, nullptr,
       1, "{train} --train.label_smoothing=1.5", 2,
       {"train.label_smoothing: '1.5' must be in [0, 1)"}, RunDir::kNotCreated},
      {"ZeroCommunicationTimeout", Copy::kNothing, nullptr,
       1, "{train} --dist.timeout_s=0", 2, {"dist.timeout_s: '0' must be > 0"}, RunDir::kNotCreated},
      {"UnknownOptimizer", Copy::kNothing, nullptr,
       1, "{train} --optim.name=rmsprop", 2, {"optim.name: 'rmsprop' must be one of adamw|sgd"}, RunDir::kNotCreated},
      {"UnknownPrecision", Copy::kNothing, nullptr,
       1, "{train} --train.precision=fp8", 2,
       {"train.precision: 'fp8' must be one of fp32|bf16|fp16"}, RunDir::kNotCreated},
      {"UnknownNonfinitePolicy", Copy::kNothing, nullptr,
       1, "{train} --train.nonfinite=ignore", 2,
       {"train.nonfinite: 'ignore' must be one of skip|abort"}, RunDir::kNotCreated},
      {"MissingConfigFile", Copy::kNothing, nullptr,
       1, "{bin} train --config {case}/absent.ini --data.path={data} --run.dir={run}", 2,
       {"config file '{case}/absent.ini' not found"}, RunDir::kNotCreated},
      {"KeyOutsideASection", Copy::kNothing, write_file("bad.ini", "batch_size = 64\n[train]\nepochs = 1\n"),
       1, "{train} --config {case}/bad.ini", 2,
       {"{case}/bad.ini: key 'batch_size' is outside a [section]"}, RunDir::kNotCreated},
      {"AKeyGivenTwiceInAnIniFile", Copy::kNothing, write_file("bad.ini", "[train]\nepochs = 1\n\nepochs = 2\n"),
       1, "{train} --config {case}/bad.ini", 2,
       {"{case}/bad.ini:4: train.epochs is given twice, on lines 2 and 4; keep one"}, RunDir::kNotCreated},
      {"GenerateWithoutATokenizer", Copy::kNothing, write_file("model.ini", "[model]\nname = mlp\n"),
       1, "{bin} generate --weights {mlp} --config {case}/model.ini --prompt hello", 2,
       {"generate: a tokenizer is needed", "the config has no data.path", "--tokenizer bytes"}, RunDir::kNotCreated},
      {"UnclosedSectionHeader", Copy::kNothing, write_file("bad.ini", "[train\nepochs = 2\n"),
       1, "{train} --config {case}/bad.ini", 2, {"{case}/bad.ini: ", "invalid line '[train'"}, RunDir::kNotCreated},
      {"MissingRequiredDataPath", Copy::kNothing, write_file("bad.ini", "[model]\nname = mlp\n"),
       1, "{bin} train --config {case}/bad.ini --run.dir={run}", 2,
       {"missing required option data.path"}, RunDir::kNotCreated},
      {"EmptyRunDir", Copy::kNothing, nullptr,
       1, "{train} --run.dir=", 2, {"run.dir: '' must not be empty"}, RunDir::kNotCreated},
      {"UnknownCommand", Copy::kNothing, nullptr,
       1, "{bin} trian --config {configs}/fashion_cnn.ini --run.dir={run}", 2,
       {"unknown command 'trian'"}, RunDir::kNotCreated},
      {"GlobalBatchNotDividedByTheRanks", Copy::kNothing, nullptr,
       2, "{train} --train.global_batch=192", 2,
       {"train.global_batch=192 is not a multiple of 2 rank(s) x train.batch_size=64 = 128"}, RunDir::kNotCreated},
      {"AbortOnNonfiniteWithDynamicLossScaling", Copy::kNothing, nullptr,
       1, "{train} --train.nonfinite=abort --train.loss_scale=dynamic", 2,
       {"train.nonfinite=abort with dynamic loss scaling (train.loss_scale=dynamic"}, RunDir::kNotCreated},
      {"NesterovWithAdamw", Copy::kNothing, nullptr,
       1, "{train} --optim.nesterov=true", 2, {"optim.nesterov=true needs optim.name=sgd"}, RunDir::kNotCreated},
      {"ShuffleWindowLargerThanHalfTheCache", Copy::kNothing, nullptr,
       1, "{train} --data.shuffle_window_mb=2 --data.cache_mb=3", 2,
       {"data.shuffle_window_mb=2 needs data.cache_mb >= 4"}, RunDir::kNotCreated},
      {"HalfPrecisionOnTheCpu", Copy::kNothing, nullptr,
       1, "{train} --train.precision=fp16 --dist.device=cpu", 2,
       {"train.precision=fp16 needs a GPU"}, RunDir::kNotCreated},
      {"StepScheduleWithoutAnInterval", Copy::kNothing, nullptr,
       1, "{train} --optim.schedule=step", 2, {"optim.schedule=step needs optim.step_every > 0"}, RunDir::kNotCreated},
      {"LinearLrScalingWithoutABaseBatch", Copy::kNothing, nullptr,
       1, "{train} --optim.lr_scaling=linear", 2,
       {"optim.lr_scaling=linear needs optim.base_batch"}, RunDir::kNotCreated},
      {"MlpHiddenWidthsWithALetter", Copy::kNothing, nullptr,
       1, "{train} --model.name=mlp --model.mlp_hidden=512,x", 2,
       {"model.mlp_hidden: '512,x' must be comma-separated integers >= 1"}, RunDir::kNotCreated},
      {"ResnetDepthNotSixNPlusTwo", Copy::kNothing, nullptr,
       1, "{train} --model.name=resnet --model.resnet_depth=21", 2,
       {"model.resnet_depth=21 is not 6n+2"}, RunDir::kNotCreated},
      {"GptHeadsThatDoNotDivideTheWidth", Copy::kNothing, nullptr,
       1, "{bin} train --config {configs}/text_gpt.ini --data.path={tokens} --run.dir={run} --model.gpt_heads=3", 2,
       {"model.gpt_embd=128 must be a multiple of model.gpt_heads=3"}, RunDir::kNotCreated},
      {"UnknownStopSignal", Copy::kNothing, nullptr,
       1, "{train} --ckpt.signals=USR9", 2,
       {"ckpt.signals: 'USR9' must be comma-separated signal names"}, RunDir::kNotCreated},
      {"TorchscriptWithoutAPath", Copy::kNothing, nullptr,
       1, "{train} --model.name=torchscript", 2, {"model.name=torchscript needs model.path"}, RunDir::kNotCreated},
      // The refusals of options that cannot work together (train/option_checks.h) come before
      // MPI starts and before the run directory exists.
      {"ZeroStageThreeWithATorchscriptModel", Copy::kNothing, nullptr,
       1, "{train} --model.name=torchscript --model.path={case}/model.pt --dist.zero_stage=3", 2,
       {"dist.zero_stage=3 with model.name=torchscript", "use dist.zero_stage=2"}, RunDir::kNotCreated},
      {"CudaGraphsWhereTheyCannotRun", Copy::kNothing, nullptr,
       1, "{train} --train.cuda_graphs=true", 2,
       {"train.cuda_graphs=true: ", "; set train.cuda_graphs=false"}, RunDir::kNotCreated},
      {"NcclBackendOnTheCpu", Copy::kNothing, nullptr,
       1, "{train} --dist.backend=nccl --dist.device=cpu", 2,
       {"dist.backend=nccl", "use dist.backend=mpi or auto"}, RunDir::kNotCreated},
      {"DiffusionObjectiveForAClassifier", Copy::kNothing, nullptr,
       1, "{train} --train.objective=diffusion", 2,
       {"train.objective=diffusion trains a denoiser, and model.name=fashion_cnn is not one"}, RunDir::kNotCreated},
      {"UnetWithoutTheDiffusionObjective", Copy::kNothing, nullptr,
       1, "{train} --model.name=unet", 2,
       {"model.name=unet predicts noise and trains with train.objective=diffusion"}, RunDir::kNotCreated},
      {"LabelSmoothingForADenoiser", Copy::kNothing, nullptr,
       1, "{train} --model.name=unet --train.objective=diffusion --train.label_smoothing=0.1", 2,
       {"train.label_smoothing smooths a classifier's labels"}, RunDir::kNotCreated},
      {"GlobalBatchAndAccumulationStepsBoth", Copy::kNothing, nullptr,
       1, "{train} --train.global_batch=128 --train.accum_steps=2", 2,
       {"train.global_batch=128 and train.accum_steps=2 both set the accumulation"}, RunDir::kNotCreated},
      {"LoraForAModelThatTakesNone", Copy::kNothing, nullptr,
       1, "{train} --model.lora_rank=4", 2,
       {"model.lora_rank=4: model.name=fashion_cnn takes no adapters"}, RunDir::kNotCreated},
      {"LoraTrainingAnUnknownKindOfParameter", Copy::kNothing, nullptr,
       1, "{bin} train --config {configs}/text_gpt.ini --data.path={tokens} --run.dir={run} --model.lora_rank=4"
       " --model.lora_train=weights", 2,
       {"model.lora_train: 'weights' is not bias or norm"}, RunDir::kNotCreated},
      {"LoraTargetThatNamesNoLayerOfTheGpt", Copy::kNothing, nullptr,
       1, "{bin} train --config {configs}/text_gpt.ini --data.path={tokens} --run.dir={run} --model.lora_rank=4"
       " --model.lora_targets=attn,wte", 2,
       {"model.lora_targets: 'wte' names no layer of the gpt model"}, RunDir::kNotCreated},
      {"Bf16LoraBaseForATorchscriptModel", Copy::kNothing, nullptr,
       1, "{train} --model.name=torchscript --model.path={case}/model.pt --model.lora_rank=4"
       " --model.lora_targets=head --model.lora_base_dtype=bf16", 2,
       {"model.lora_base_dtype=bf16: a TorchScript model's code"}, RunDir::kNotCreated},
      {"GptShapeFromWeightsWithoutInitFrom", Copy::kNothing, nullptr,
       1, "{bin} train --config {configs}/text_gpt.ini --data.path={tokens} --run.dir={run} --model.gpt_layers=0", 2,
       {"take 0 only with model.init_from"}, RunDir::kNotCreated},
      {"ZeroStageOneWithANonContiguousParameter", Copy::kNothing, export_module("model.pt", "--transposed-head"),
       1, "{train} --model.name=torchscript --model.path={case}/model.pt --dist.zero_stage=1", 2,
       {"dist.zero_stage=1 shards contiguous float32 parameters; 'head.weight' is non-contiguous Float: use "
        "dist.zero_stage=0"},
       RunDir::kNotCreated},
  };
}

std::vector<Case> dataset_cases() {
  return {
      {"DataPathThatDoesNotExist", Copy::kNothing, nullptr,
       1, "{train} --data.path={case}/absent", 3, {"dataset '{case}/absent' not found"}, RunDir::kNotCreated},
      {"DirectoryThatIsNotADataset", Copy::kNothing, write_file("plain/readme.txt", "not a dataset\n"),
       1, "{train} --data.path={case}/plain", 3,
       {"{case}/plain/manifest.json not found: '{case}/plain' is not an hpctrain dataset"}, RunDir::kNotCreated},
      {"MissingShardFile", Copy::kDataset, remove_data_file("train-00001.h5"),
       1, "{train}", 3, {"{data}/train-00001.h5: shard listed in the manifest is missing"}, RunDir::kNotCreated},
      {"TruncatedShard", Copy::kDataset, truncate_data_file("train-00001.h5"),
       1, "{train}", 3, {"{data}/train-00001.h5: cannot open HDF5 file"}, RunDir::kNotCreated},
      {"ShardWithAFlippedByte", Copy::kDataset, flip_data_file("train-00001.h5"),
       2, "{train}", 3, {"{data}/train-00001.h5: dataset 'image'", "fail their fletcher32 checksum"},
       RunDir::kNoCheckpoint},
      {"ShardWithAFlippedByteReadThroughHdf5", Copy::kDataset, flip_data_file("train-00001.h5"),
       2, "{train} --data.io=posix", 3, {"{data}/train-00001.h5: dataset 'image'", "fail their fletcher32 checksum"},
       RunDir::kNoCheckpoint},
      {"ShardWithAFlippedByteReadThroughMpiIo", Copy::kDataset, flip_data_file("train-00001.h5"),
       2, "{train} --data.io=mpio", 3, {"{data}/train-00001.h5: dataset 'image'"}, RunDir::kNoCheckpoint},
      {"ManifestThatIsNotJson", Copy::kDataset, write_data_file("manifest.json", "{ not json\n"),
       1, "{train}", 3, {"{data}/manifest.json: malformed manifest"}, RunDir::kNotCreated},
      {"ManifestListingAShardThatIsNotThere", Copy::kDataset,
       set_manifest("/splits/train/shards/2", "{\"file\": \"train-00002.h5\", \"samples\": 300}"),
       1, "{train}", 3, {"{data}/train-00002.h5: shard listed in the manifest is missing"}, RunDir::kNotCreated},
      {"ManifestCountingMoreSamplesThanTheShardHolds", Copy::kDataset,
       set_manifest("/splits/train/shards/1/samples", "400"),
       1, "{train}", 3,
       {"{data}/train-00001.h5: field 'image' is uint8[300,1,28,28] but the manifest says uint8[400,1,28,28]"},
       RunDir::kNotCreated},
      {"ManifestPointingOutsideTheDataset", Copy::kDataset,
       set_manifest("/splits/train/shards/0/file", "\"../../train-00000.h5\""),
       1, "{train}", 3,
       {"{data}/manifest.json: shard '../../train-00000.h5' of split 'train' is not a file name inside the dataset directory"},
       RunDir::kNotCreated},
      {"ManifestWithASampleCountBeyond64Bits", Copy::kDataset, set_manifest("/splits/train/shards/0/samples", "1e308"),
       1, "{train}", 3,
       {"{data}/manifest.json: 'samples' of shard 'train-00000.h5' in split 'train' is 1e+308; "
        "it must be a JSON integer from 0 to 2^63-1"},
       RunDir::kNotCreated},
      {"ManifestWithANegativeExtent", Copy::kDataset, set_manifest("/fields/0/shape/0", "-1"),
       1, "{train}", 3, {"{data}/manifest.json: 'shape' of field 'image' is -1"}, RunDir::kNotCreated},
      {"ManifestOfANewerVersion", Copy::kDataset, set_manifest("/version", "2"),
       1, "{train}", 3, {"{data}/manifest.json: format version 2 is newer than this hpctrain reads (1)"},
       RunDir::kNotCreated},
      {"ManifestWithoutFields", Copy::kDataset, erase_manifest("fields"),
       1, "{train}", 3, {"{data}/manifest.json: malformed manifest", "'fields'"}, RunDir::kNotCreated},
      {"ManifestFieldOfAnotherDtype", Copy::kDataset, set_manifest("/fields/0/dtype", "\"float32\""),
       1, "{train}", 3, {"{data}/train-00000.h5: field 'image' is uint8[300,1,28,28] but the manifest says float32"},
       RunDir::kNotCreated},
      {"ManifestFieldOfAnUnknownDtype", Copy::kDataset, set_manifest("/fields/1/dtype", "\"int28\""),
       1, "{train}", 3, {"{data}/manifest.json: field 'label': unknown dtype 'int28'"}, RunDir::kNotCreated},
      {"ManifestWithAZeroStd", Copy::kDataset, set_manifest("/input_std", "0"),
       1, "{train}", 3, {"{data}/manifest.json: input_std must be > 0"}, RunDir::kNotCreated},
      {"LabelsOutsideTheDeclaredClasses", Copy::kDataset, set_manifest("/num_classes", "5"),
       2, "{train}", 3, {"has a label 9 outside [0, 5)"}, RunDir::kNoCheckpoint},
      {"EvalSplitThatIsNotThere", Copy::kNothing, nullptr,
       1, "{train} --data.eval_split=validation", 3, {"has no split 'validation' (it has: test, train)"},
       RunDir::kNotCreated},
      {"TrainSplitThatIsNotThere", Copy::kNothing, nullptr,
       1, "{train} --data.train_split=validation", 3, {"has no split 'validation' (it has: test, train)"},
       RunDir::kNotCreated},
      {"EmptyTrainSplit", Copy::kDataset, set_manifest("/splits/train", "{\"samples\": 0, \"shards\": []}"),
       1, "{train}", 3, {"{data}: split 'train' is empty"}, RunDir::kNotCreated},
      {"TokenStreamForAnImageClassifier", Copy::kNothing, nullptr,
       1, "{train} --data.path={tokens}", 2,
       {"dataset {tokens} is a token stream, which only model.name=gpt, llama and torchscript"}, RunDir::kNotCreated},
      {"GptOnImages", Copy::kNothing, nullptr,
       1, "{train} --model.name=gpt", 2,
       {"model.name=gpt learns from a token stream", "dataset {data} holds samples"}, RunDir::kNotCreated},
      {"DropLastWithAGlobalBatchLargerThanTheSplit", Copy::kNothing, nullptr,
       2, "{train} --train.batch_size=400 --train.drop_last=true", 2,
       {"train.drop_last: a global batch of 800 (2 ranks x train.batch_size 400)", "larger than the split's 600 samples"},
       RunDir::kNotCreated},
      {"BatchLargerThanARanksShareOfTheSplit", Copy::kNothing, nullptr,
       2, "{train} --train.batch_size=100000000", 2,
       {"train.batch_size=100000000 is larger than a rank's share of the training split (300 of its 600 samples "
        "at 2 rank(s)); lower train.batch_size to 300 or less"},
       RunDir::kNotCreated},
      {"GptBlockLongerThanTheTokenStream", Copy::kNothing, nullptr,
       1, "{bin} train --config {configs}/text_gpt.ini --data.path={tokens} --run.dir={run} --model.gpt_block_size=100000", 3,
       {"split 'train' of {tokens} has ", "fewer than one window of model.gpt_block_size + 1 = 100001"},
       RunDir::kNotCreated},
      {"ImageAugmentationOnATokenStream", Copy::kNothing, nullptr,
       1, "{bin} train --config {configs}/text_gpt.ini --data.path={tokens} --run.dir={run} --data.random_flip=true", 2,
       {"data.random_crop and data.random_flip augment images; dataset {tokens} is a token stream"},
       RunDir::kNotCreated},
  };
}

std::vector<Case> checkpoint_cases() {
  const std::string eval = "{bin} eval --config {configs}/fashion_cnn.ini --data.path={data} --run.dir={run}"
                           " --train.threads=1 --checkpoint ";
  return {
      {"ResumeAutoFromAFileThatIsNotHdf5", Copy::kRun, harm_latest(Harm::kNotHdf5),
       2, "{train}", 4, {"none of the 1 checkpoint(s) in {run}/checkpoints verifies"}, RunDir::kUnchanged},
      {"ResumeAutoFromAnEmptyFile", Copy::kRun, harm_latest(Harm::kEmpty),
       1, "{train}", 4, {"none of the 1 checkpoint(s) in {run}/checkpoints verifies"}, RunDir::kUnchanged},
      {"ResumeAutoFromATruncatedCheckpoint", Copy::kRun, harm_latest(Harm::kTruncate),
       2, "{train}", 4, {"none of the 1 checkpoint(s) in {run}/checkpoints verifies"}, RunDir::kUnchanged},
      {"ResumeAutoFromAFlippedByte", Copy::kRun, harm_latest(Harm::kFlipModel),
       2, "{train}", 4, {"none of the 1 checkpoint(s) in {run}/checkpoints verifies"}, RunDir::kUnchanged},
      {"ResumeAutoFromAFutureFormatVersion", Copy::kRun, harm_latest(Harm::kFutureVersion),
       1, "{train}", 4, {"none of the 1 checkpoint(s) in {run}/checkpoints verifies"}, RunDir::kUnchanged},
      {"ResumePathFromAFileThatIsNotHdf5", Copy::kRun, harm_copy(Harm::kNotHdf5),
       1, "{train} --ckpt.resume={case}/bad.h5", 4, {"{case}/bad.h5: not an HDF5 file"}, RunDir::kUnchanged},
      {"ResumePathFromATruncatedCheckpoint", Copy::kRun, harm_copy(Harm::kTruncate),
       1, "{train} --ckpt.resume={case}/bad.h5", 4, {"{case}/bad.h5: cannot open HDF5 file"}, RunDir::kUnchanged},
      {"ResumePathFromAFlippedByte", Copy::kRun, harm_copy(Harm::kFlipModel),
       2, "{train} --ckpt.resume={case}/bad.h5", 4, {"{case}/bad.h5: cannot read dataset model/fc1.weight"},
       RunDir::kUnchanged},
      {"ResumePathFromAFutureFormatVersion", Copy::kRun, harm_copy(Harm::kFutureVersion),
       1, "{train} --ckpt.resume={case}/bad.h5", 4,
       {"{case}/bad.h5: format version 3 is newer than this hpctrain reads (2)"}, RunDir::kUnchanged},
      {"ResumePathFromAMissingFile", Copy::kRun, nullptr,
       1, "{train} --ckpt.resume={case}/absent.h5", 4, {"{case}/absent.h5: no such checkpoint file"},
       RunDir::kUnchanged},
      {"ResumeFromAnotherModelsCheckpoint", Copy::kRun, nullptr,
       1, "{train} --ckpt.resume={mlp}", 2,
       {"the config differs from that of checkpoint {mlp}: model.name mlp -> fashion_cnn"}, RunDir::kUnchanged},
      {"ResumeFromAnotherModelsCheckpointAllowingTheChange", Copy::kRun, nullptr,
       2, "{train} --ckpt.resume={mlp} --ckpt.allow_config_change=true", 4,
       {"{mlp} (model mlp) does not match this model: missing bn1.bias"}, RunDir::kUnchanged},
      {"ResumeWithAnotherLearningRate", Copy::kRun, nullptr,
       2, "{train} --optim.lr=0.01", 2,
       {"the config differs from that of checkpoint {run}/checkpoints/ckpt-2.h5: optim.lr 0.002 -> 0.01"},
       RunDir::kUnchanged},
      {"ResumeWithAnotherOptimizerAllowingTheChange", Copy::kRun, nullptr,
       2, "{train} --optim.name=sgd --ckpt.allow_config_change=true", 4,
       {"optimizer state of bn1.bias has no momentum_buffer", "optim.name"}, RunDir::kUnchanged},
      {"EvalOfAMissingCheckpoint", Copy::kNothing, nullptr,
       1, eval + "{case}/absent.h5", 4, {"{case}/absent.h5: no such checkpoint file"}, RunDir::kNotCreated},
      {"EvalOfAFileThatIsNotHdf5", Copy::kNothing, harm_copy(Harm::kNotHdf5),
       1, eval + "{case}/bad.h5", 4, {"{case}/bad.h5: not an HDF5 file"}, RunDir::kNotCreated},
      {"EvalOfATruncatedCheckpoint", Copy::kNothing, harm_copy(Harm::kTruncate),
       1, eval + "{case}/bad.h5", 4, {"{case}/bad.h5: cannot open HDF5 file"}, RunDir::kNotCreated},
      {"EvalOfAFlippedByteInTheModel", Copy::kNothing, harm_copy(Harm::kFlipModel),
       1, eval + "{case}/bad.h5", 4, {"{case}/bad.h5: cannot read dataset model/fc1.weight"}, RunDir::kNotCreated},
      {"EvalOfAFutureFormatVersion", Copy::kNothing, harm_copy(Harm::kFutureVersion),
       1, eval + "{case}/bad.h5", 4, {"{case}/bad.h5: format version 3 is newer than this hpctrain reads (2)"},
       RunDir::kNotCreated},
      {"EvalOfAnotherModelsCheckpoint", Copy::kNothing, nullptr,
       1, eval + "{mlp}", 4, {"{mlp} (model mlp) does not match this model"}, RunDir::kNotCreated},
      {"EvalOfADatasetShard", Copy::kNothing, nullptr,
       1, eval + "{data}/train-00000.h5", 4,
       {"{data}/train-00000.h5: not an hpctrain checkpoint (no format attribute)"}, RunDir::kNotCreated},
      {"VerifyOfATruncatedCheckpoint", Copy::kNothing, harm_copy(Harm::kTruncate),
       1, "{bin} ckpt verify {case}/bad.h5", 4, {"{case}/bad.h5: cannot open HDF5 file"}, RunDir::kNotCreated},
      {"VerifyOfAFlippedByteInTheOptimizerState", Copy::kNothing, harm_copy(Harm::kFlipOptim),
       1, "{bin} ckpt verify {case}/bad.h5", 4, {"{case}/bad.h5: cannot read dataset optim/conv2.weight/exp_avg"},
       RunDir::kNotCreated},
      {"VerifyOfAFutureFormatVersion", Copy::kNothing, harm_copy(Harm::kFutureVersion),
       1, "{bin} ckpt verify {case}/bad.h5", 4, {"{case}/bad.h5: format version 3 is newer"}, RunDir::kNotCreated},
      {"InspectOfAFileThatIsNotHdf5", Copy::kNothing, harm_copy(Harm::kNotHdf5),
       1, "{bin} ckpt inspect {case}/bad.h5", 4, {"{case}/bad.h5: not an HDF5 file"}, RunDir::kNotCreated},
  };
}

// --- the sweep ------------------------------------------------------------------------------------

class BadInputSweep : public ::testing::Test {
 protected:
  // A 600-sample dataset, a token stream, a 2-rank run of fashion_cnn with its checkpoint after 2
  // steps (what the resume rows copy), and a checkpoint of the mlp model.
  static void SetUpTestSuite() {
    const FashionSuite suite = make_fashion_suite("badinput", 600, 2);
    work_ = suite.work;
    data_ = suite.data;
    {
      std::ofstream text(work_ + "/text.txt");
      for (int i = 0; i < 400; ++i) text << "line " << i << "\n";
    }
    tokens_ = work_ + "/tokens";
    const ProcessResult tokens =
        run_command(kBin + " prepare text --source " + work_ + "/text.txt --out " + tokens_ + " --shards 2");
    ASSERT_EQ(tokens.exit_code, 0) << tokens.err;
    run_ = work_ + "/run";
    const Env env{work_, data_, run_, ""};
    const ProcessResult trained = run_command(mpirun(2) + expand(kTrain, env) + " --train.max_steps=2");
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    checkpoint_ = ckpt::latest_checkpoint(run_ + "/checkpoints");
    ASSERT_EQ(fs::path(checkpoint_).filename().string(), std::string("ckpt-2.h5")) << trained.err;
    const ProcessResult mlp = run_command(kBin + " train --data.path=" + data_ + " --run.dir=" + work_ + "/mlp" +
                                          " --model.name=mlp --train.max_steps=2 --data.eval_split= --train.threads=1");
    ASSERT_EQ(mlp.exit_code, 0) << mlp.err;
    mlp_ = ckpt::latest_checkpoint(work_ + "/mlp/checkpoints");
    ASSERT_FALSE(mlp_.empty()) << mlp.err;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  static std::string expand(std::string text, const Env& env) {
    replace_all(text, "{train}", kTrain);
    const std::map<std::string, std::string> values = {
        {"{bin}", kBin},       {"{configs}", kSource + "/configs"}, {"{case}", env.dir}, {"{data}", env.data},
        {"{run}", env.run},    {"{tokens}", tokens_},               {"{mlp}", mlp_}};
    for (const auto& [key, value] : values) replace_all(text, key, value);
    return text;
  }

  static void sweep(const std::vector<Case>& cases) {
    ASSERT_FALSE(checkpoint_.empty() || mlp_.empty()) << "the suite's set-up failed";
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name);
      run_case(c);
    }
  }

  static void run_case(const Case& c) {
    Env env{work_ + "/" + c.name, data_, work_ + "/" + c.name + "/run", checkpoint_};
    ASSERT_FALSE(fs::exists(env.dir)) << "two rows named " << c.name;
    fs::create_directories(env.dir);
    if (c.copy == Copy::kDataset) {
      env.data = env.dir + "/data";
      fs::copy(data_, env.data, fs::copy_options::recursive);
    } else if (c.copy == Copy::kRun) {
      fs::copy(run_, env.run, fs::copy_options::recursive);
    }
    try {
      if (c.damage) c.damage(env);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      return;
    }
    const Tree before = snapshot(env.run);

    const std::string command = (c.ranks > 1 ? mpirun(c.ranks) : std::string()) + expand(c.command, env);
    const ProcessResult r = run_command("timeout -k 10 120 " + command);
    ASSERT_TRUE(r.exit_code != 124 && r.exit_code != 137) << "hung: " << command << "\n" << r.err;
    EXPECT_EQ(r.exit_code, c.code) << command << "\n" << r.err;
    EXPECT_EQ(count_lines_with(r.err, kErrorTag), 1) << command << "\n" << r.err;
    const std::string line = error_line(r.err);
    for (const std::string& fragment : c.fragments) {
      const std::string wanted = expand(fragment, env);
      EXPECT_NE(line.find(wanted), std::string::npos) << "'" << wanted << "' is not in the error line: " << line;
    }
    switch (c.run_dir) {
      case RunDir::kNotCreated:
        EXPECT_FALSE(fs::exists(env.run)) << "nothing may be written, but " << env.run << " was created";
        break;
      case RunDir::kNoCheckpoint:
        EXPECT_TRUE(ckpt::list_checkpoints(env.run + "/checkpoints").empty()) << env.run;
        break;
      case RunDir::kUnchanged:
        EXPECT_EQ(changes(before, snapshot(env.run)), "") << env.run;
        break;
    }
    hpctrain::sys::remove_tree(env.dir);
  }

  static std::string work_;
  static std::string data_;
  static std::string tokens_;
  static std::string run_;
  static std::string checkpoint_;
  static std::string mlp_;
};

std::string BadInputSweep::work_;
std::string BadInputSweep::data_;
std::string BadInputSweep::tokens_;
std::string BadInputSweep::run_;
std::string BadInputSweep::checkpoint_;
std::string BadInputSweep::mlp_;

TEST_F(BadInputSweep, Configs) { sweep(config_cases()); }

TEST_F(BadInputSweep, Datasets) { sweep(dataset_cases()); }

TEST_F(BadInputSweep, Checkpoints) { sweep(checkpoint_cases()); }

TEST_F(BadInputSweep, TheTableHoldsAtLeastFortyRows) {
  EXPECT_GE(config_cases().size() + dataset_cases().size() + checkpoint_cases().size(), 40u);
}

}  // namespace
}  // namespace hpctrain::testing
