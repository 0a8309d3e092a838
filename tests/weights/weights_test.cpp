// weights/: files of weights in (safetensors, torch.save, checkpoints), Hugging Face GPT-2's names,
// and model.init_from's matching; the restricted unpickler's refusals.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "hpctrain/core/error.h"
#include "hpctrain/model/model.h"
#include "hpctrain/weights/gpt2_names.h"
#include "hpctrain/weights/init_from.h"
#include "hpctrain/weights/pytorch_file.h"
#include "hpctrain/weights/weight_file.h"
#include "hpctrain/weights/weight_writer.h"

namespace hpctrain::weights {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("hpctrain_weights_" + std::to_string(::getpid()) + "_" + name)).string();
}

config::ModelConfig small_gpt() {
  config::ModelConfig c;
  c.name = config::ModelName::kGpt;
  c.gpt_layers = 2;
  c.gpt_heads = 2;
  c.gpt_embd = 16;
  c.gpt_block_size = 8;
  return c;
}

std::shared_ptr<model::Model> make_gpt(std::uint64_t seed) {
  torch::manual_seed(seed);
  return model::make_model(small_gpt(), {{8}, 64, true});
}

ckpt::NamedTensors state_of(model::Model& model) {
  ckpt::NamedTensors out;
  for (const auto& p : model.module().named_parameters()) out.emplace_back(p.key(), p.value().detach().clone());
  return out;
}

void expect_same(const ckpt::NamedTensors& a, const ckpt::NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(at::equal(a[i].second.to(at::kFloat), b[i].second.to(at::kFloat))) << a[i].first;
  }
}

TEST(Gpt2Names, HuggingFaceLayoutIsTransposedTiedAndMapsBackExactly) {
  const auto gpt = make_gpt(1);
  const ckpt::NamedTensors ours = state_of(*gpt);
  EXPECT_EQ(detect_names(ours), config::InitNames::kHpctrain);
  const ckpt::NamedTensors hf = to_hf_gpt2(ours);
  EXPECT_EQ(detect_names(hf), config::InitNames::kHfGpt2);
  ASSERT_EQ(hf.size(), ours.size() + 1);  // + lm_head.weight
  for (const auto& [name, tensor] : hf) {
    if (name == "transformer.h.1.attn.c_attn.weight") {
      EXPECT_EQ(tensor.sizes(), (std::vector<std::int64_t>{16, 48}));
    } else if (name == "transformer.h.0.mlp.c_proj.weight") {
      EXPECT_EQ(tensor.sizes(), (std::vector<std::int64_t>{64, 16}));
    } else if (name == "lm_head.weight") {
      EXPECT_TRUE(at::equal(tensor, ours[0].second));
    }
  }
  std::vector<std::string> dropped;
  expect_same(from_hf_gpt2(hf, "w", dropped), ours);
  EXPECT_EQ(dropped, std::vector<std::string>{"lm_head.weight"});
}

TEST(Gpt2Names, GPT2ModelNamesAndCausalMasksAreAccepted) {
  ckpt::NamedTensors hf = to_hf_gpt2(state_of(*make_gpt(2)));
  ckpt::NamedTensors bare;
  for (auto& [name, tensor] : hf) {
    if (name != "lm_head.weight") bare.emplace_back(name.substr(std::string("transformer.").size()), tensor);
  }
  bare.emplace_back("h.0.attn.bias", at::ones({1, 1, 8, 8}));
  EXPECT_EQ(detect_names(bare), config::InitNames::kHfGpt2);
  std::vector<std::string> dropped;
  expect_same(from_hf_gpt2(bare, "w", dropped), state_of(*make_gpt(2)));
  EXPECT_EQ(dropped, std::vector<std::string>{"h.0.attn.bias"});
}

TEST(Gpt2Names, AnUntiedOutputLayerIsRefused) {
  ckpt::NamedTensors hf = to_hf_gpt2(state_of(*make_gpt(3)));
  for (auto& [name, tensor] : hf) {
    if (name == "lm_head.weight") tensor = tensor + 1;
  }
  std::vector<std::string> dropped;
  EXPECT_THROW(from_hf_gpt2(hf, "w", dropped), CheckpointError);
}

TEST(WeightFiles, EveryFormatReadsBackWhatWasWritten) {
  const auto gpt = make_gpt(4);
  const ckpt::NamedTensors ours = state_of(*gpt);
  for (const WeightFormat format : {WeightFormat::kSafetensors, WeightFormat::kPytorch}) {
    const std::string path = temp_path(std::string("w.") + name_of(format));
    write_weights(path, ours, format, {});
    const WeightFile file = WeightFile::open(path);
    EXPECT_EQ(file.format(), format);
    expect_same(file.tensors(), ours);
    fs::remove(path);
  }
  ckpt::NamedTensors half;
  for (const auto& [name, t] : ours) half.emplace_back(name, t.to(at::kBFloat16));
  const std::string path = temp_path("bf16.safetensors");
  write_weights(path, half, WeightFormat::kSafetensors, {});
  const WeightFile file = WeightFile::open(path);
  EXPECT_EQ(file.tensors()[0].second.scalar_type(), at::kBFloat16);
  expect_same(file.tensors(), half);
  fs::remove(path);
}

TEST(WeightFiles, OtherFilesAreRefusedInOneLine) {
  const std::string path = temp_path("text.txt");
  std::ofstream(path) << "not weights at all";
  try {
    WeightFile::open(path);
    FAIL() << "read a text file as weights";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("not a weights file hpctrain reads"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

TEST(InitFrom, StrictListsEveryMismatchAndLeavesTheModelAlone) {
  const auto source = make_gpt(5);
  MappedWeights weights;
  weights.tensors = state_of(*source);
  weights.tensors.erase(weights.tensors.begin() + 2);  // missing: transformer.h.0.ln_1.weight
  weights.tensors.emplace_back("transformer.h.9.ln_1.weight", at::ones({16}));  // unexpected
  weights.tensors[0].second = at::zeros({65, 16});  // wte of another vocabulary
  const auto target = make_gpt(6);
  const ckpt::NamedTensors before = state_of(*target);
  try {
    load_weights(*target, weights, /*strict=*/true, "w.safetensors");
    FAIL() << "a strict load accepted mismatched weights";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("missing from the file: transformer.h.0.ln_1.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("not in the model: transformer.h.9.ln_1.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("transformer.wte.weight (file [65, 16] Float, model [64, 16] Float)"), std::string::npos)
        << what;
  }
  expect_same(state_of(*target), before);
  const InitReport report = load_weights(*target, weights, /*strict=*/false, "w.safetensors");
  EXPECT_EQ(report.loaded.size(), before.size() - 2);
  const ckpt::NamedTensors after = state_of(*target);
  EXPECT_TRUE(at::equal(after[1].second, state_of(*source)[1].second));  // wpe loaded
  EXPECT_TRUE(at::equal(after[0].second, before[0].second));             // wte kept
}

TEST(InitFrom, HalfPrecisionWeightsLoadConvertedAndTheShapeComesFromTheFile) {
  const auto source = make_gpt(7);
  MappedWeights weights;
  for (const auto& [name, t] : state_of(*source)) weights.tensors.emplace_back(name, t.to(at::kHalf));
  config::ModelConfig shape = small_gpt();
  shape.gpt_layers = shape.gpt_embd = shape.gpt_block_size = 0;
  std::int64_t vocabulary = 0;
  fill_gpt_shape(shape, weights.tensors, vocabulary);
  EXPECT_EQ(shape.gpt_layers, 2);
  EXPECT_EQ(shape.gpt_embd, 16);
  EXPECT_EQ(shape.gpt_block_size, 8);
  EXPECT_EQ(vocabulary, 64);
  const auto target = model::make_model(shape, {{8}, 64, true});
  load_weights(*target, weights, true, "w");
  const ckpt::NamedTensors loaded = state_of(*target);
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_TRUE(at::equal(loaded[i].second, weights.tensors[i].second.to(at::kFloat))) << loaded[i].first;
  }
}

// A pickle of {"name": _rebuild_tensor_v2(storage of 2 floats, offset 0, size (n,), stride (1,))},
// as torch.save writes one.
std::string state_dict_pickle(char size) {
  const char bytes[] =
      "\x80\x02}(X\x04\x00\x00\x00name"
      "ctorch._utils\n_rebuild_tensor_v2\n"
      "((X\x07\x00\x00\x00storage"
      "ctorch\nFloatStorage\n"
      "X\x01\x00\x00\x00"
      "0"
      "X\x03\x00\x00\x00"
      "cpu"
      "K\x02tQK\x00K";
  const char tail[] = "\x85K\x01\x85\x89" "ccollections\nOrderedDict\n" ")RtRu.";
  return std::string(bytes, sizeof bytes - 1) + size + std::string(tail, sizeof tail - 1);
}

std::string unpickle_refusal(const std::string& pickle) {
  const StorageLoader zeros = [](const std::string&, at::ScalarType dtype, std::int64_t numel) {
    return at::zeros({numel}, at::TensorOptions().dtype(dtype));
  };
  try {
    const ckpt::NamedTensors out = unpickle_state_dict(reinterpret_cast<const std::uint8_t*>(pickle.data()),
                                                       static_cast<std::int64_t>(pickle.size()), zeros, "p.pt");
    return out.size() == 1 && out[0].first == "name" && out[0].second.numel() == 2 ? "accepted" : "wrong";
  } catch (const CheckpointError& e) {
    return e.what();
  }
}

TEST(PytorchFiles, TheUnpicklerReadsTensorsAndNothingElse) {
  EXPECT_EQ(unpickle_refusal(state_dict_pickle('\x02')), "accepted");
  EXPECT_NE(unpickle_refusal(state_dict_pickle('\x05')).find("reaches past its storage of 2 elements"),
            std::string::npos);
  const std::string code = std::string("\x80\x02" "cposix\nsystem\n" "X\x02\x00\x00\x00", 21) + "ls\x85R.";
  EXPECT_NE(unpickle_refusal(code).find("'posix.system', which is not part of a dict of tensors"), std::string::npos);
  EXPECT_NE(unpickle_refusal(state_dict_pickle('\x02').substr(0, 11)).find("the pickle ends inside"),
            std::string::npos);
}

}  // namespace
}  // namespace hpctrain::weights
