// The readers of model.init_from. The input's first byte picks what the rest is: even, a weights
// file (safetensors, a torch.save zip, or anything else) opened as model.init_from opens it, its
// names mapped for a gpt and loaded, not strictly, into a small one; odd, the data.pkl of a
// torch.save file, given to the restricted unpickler with storages of zeros (so that a mutated
// pickle is not stopped by the zip's checksums first).
#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "fuzz_target.h"
#include "hpctrain/core/error.h"
#include "hpctrain/model/model.h"
#include "hpctrain/weights/gpt2_names.h"
#include "hpctrain/weights/init_from.h"
#include "hpctrain/weights/pytorch_file.h"
#include "hpctrain/weights/weight_file.h"
#include "hpctrain/weights/weight_writer.h"

namespace hpctrain::fuzz {
namespace {

config::ModelConfig tiny_gpt() {
  config::ModelConfig c;
  c.name = config::ModelName::kGpt;
  c.gpt_layers = 1;
  c.gpt_heads = 2;
  c.gpt_embd = 8;
  c.gpt_block_size = 4;
  return c;
}

std::shared_ptr<model::Model> make_tiny_gpt() {
  torch::manual_seed(1);
  return model::make_model(tiny_gpt(), {{4}, 16, true});
}

ckpt::NamedTensors state_of(model::Model& model) {
  ckpt::NamedTensors out;
  for (const auto& p : model.module().named_parameters()) out.emplace_back(p.key(), p.value().detach().clone());
  return out;
}

void read_weights_file(const std::string& path) {
  static const std::shared_ptr<model::Model> model = make_tiny_gpt();
  const weights::WeightFile file = weights::WeightFile::open(path);
  const weights::MappedWeights mapped = weights::map_weights(tiny_gpt(), file);
  config::ModelConfig shape = tiny_gpt();
  shape.gpt_layers = shape.gpt_embd = shape.gpt_block_size = 0;
  std::int64_t vocabulary = 0;
  weights::fill_gpt_shape(shape, mapped.tensors, vocabulary);
  weights::load_weights(*model, mapped, /*strict=*/false, path);
}

void unpickle(const std::uint8_t* data, std::size_t size) {
  const weights::StorageLoader zeros = [](const std::string& key, at::ScalarType dtype, std::int64_t numel) {
    if (numel > (1 << 20)) throw CheckpointError("storage " + key + " is larger than this input");
    return at::zeros({numel}, at::TensorOptions().dtype(dtype));
  };
  (void)weights::unpickle_state_dict(data, static_cast<std::int64_t>(size), zeros, "data.pkl");
}

}  // namespace

void write_seeds(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const ckpt::NamedTensors ours = state_of(*make_tiny_gpt());
  const auto seed = [&](const std::string& name, char kind, const std::string& file) {
    write_file(dir + "/" + name, std::string(1, kind) + read_file(file));
  };
  const std::string scratch = scratch_dir() + "/seed";
  weights::write_weights(scratch, weights::to_hf_gpt2(ours), weights::WeightFormat::kSafetensors, {});
  seed("hf-gpt2.safetensors", '\0', scratch);
  ckpt::NamedTensors half;
  for (const auto& [name, t] : ours) half.emplace_back(name, t.to(at::kBFloat16));
  weights::write_weights(scratch, half, weights::WeightFormat::kSafetensors, {});
  seed("hpctrain-bf16.safetensors", '\0', scratch);
  weights::write_weights(scratch, ours, weights::WeightFormat::kPytorch, {});
  seed("libtorch-save.pt", '\0', scratch);
  // The pickle alone, as unpickle() takes it: data.pkl of the same file.
  caffe2::serialize::PyTorchStreamReader zip(scratch);
  const auto [pickle, size] = zip.getRecord("data.pkl");
  write_file(dir + "/libtorch-save.pkl", std::string(1, '\1') + std::string(static_cast<const char*>(pickle.get()), size));
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  if (size == 0) return 0;
  static const std::string path = fuzz::scratch_dir() + "/weights";
  fuzz::silence_logs();
  try {
    if (data[0] % 2 == 0) {
      fuzz::write_file(path, data + 1, size - 1);
      fuzz::read_weights_file(path);
    } else {
      fuzz::unpickle(data + 1, size - 1);
    }
  } catch (const Error& e) {
    if (e.code() != ExitCode::kCheckpoint && e.code() != ExitCode::kUsage) throw;
    fuzz::record(fuzz::Outcome::kRefused);
    return 0;
  }
  fuzz::record(fuzz::Outcome::kAccepted);
  return 0;
}
