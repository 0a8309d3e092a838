// `hpctrain ckpt inspect|verify|export`: look inside a checkpoint, check every checksum, and hand
// the trained model to PyTorch users as a state_dict file. Single process; no MPI.
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <unistd.h>

#include <fstream>
#include <iomanip>
#include <iostream>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/cli/commands.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/timer.h"
#include "hpctrain/io/h5_file.h"
#include "runtime.h"

namespace hpctrain::cli {
namespace {

const char* kUsage =
    "usage: hpctrain ckpt inspect FILE\n"
    "       hpctrain ckpt verify FILE\n"
    "       hpctrain ckpt export FILE --to state_dict --out FILE.pt\n\n"
    "inspect: the metadata (step, epoch, sampler cursor, world size, versions, config) and every\n"
    "         tensor with its dtype, shape and size, group by group.\n"
    "verify:  reads every tensor, so every fletcher32 checksum is checked; exit 4 names the\n"
    "         first bad one.\n"
    "export:  the model's parameters and buffers as a PyTorch state_dict (torch.load reads it:\n"
    "         model.load_state_dict(torch.load(\"FILE.pt\")); docs/checkpoint-format.md).\n";

int inspect(const ckpt::CheckpointReader& reader) {
  const ckpt::CheckpointMeta& m = reader.meta();
  std::cout << "checkpoint " << reader.path() << "\n"
            << "  format version " << m.format_version << ", written by hpctrain " << m.hpctrain_version
            << " at " << m.created << " on " << m.world_size << " rank(s)\n"
            << "  model " << m.model_name << ", step " << m.step << ", epoch " << m.epoch + 1
            << " (0-based " << m.epoch << "), sampler cursor " << m.cursor << "\n";
  for (const char* group : ckpt::kGroups) {
    const ckpt::NamedTensors tensors = reader.read_group(group);
    if (tensors.empty()) continue;
    std::int64_t bytes = 0;
    for (const auto& [name, tensor] : tensors) bytes += static_cast<std::int64_t>(tensor.nbytes());
    std::cout << "/" << group << ": " << tensors.size() << " tensor(s), " << std::fixed << std::setprecision(2)
              << static_cast<double>(bytes) / 1e6 << " MB\n";
    for (const auto& [name, tensor] : tensors) {
      std::cout << "  " << std::left << std::setw(40) << name << " " << c10::toString(tensor.scalar_type())
                << c10::str(tensor.sizes()) << "\n";
    }
  }
  std::cout << "config:\n" << m.config_text;
  return 0;
}

int verify(const ckpt::CheckpointReader& reader) {
  const Timer timer;
  const std::int64_t tensors = reader.verify();
  std::cout << "verify: " << reader.path() << " OK, " << tensors << " tensor(s) read and checksummed in "
            << std::fixed << std::setprecision(2) << timer.elapsed_s() << " s\n";
  return 0;
}

// The bytes of a torch.save file holding {name: tensor}. torch::pickle_save would tag the typed
// Dict with torch.jit._pickle.restore_type_tag, which torch.load's weights_only unpickler (the
// default since PyTorch 2.6) refuses; pickled untagged it is a plain dict that loads anywhere.
std::vector<char> torch_save_bytes(const c10::Dict<std::string, at::Tensor>& state) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler([&](const char* data, size_t size) { pickled.insert(pickled.end(), data, data + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(state);
  pickler.stop();
  std::vector<char> archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    archive.insert(archive.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return archive;
}

int export_state_dict(const ckpt::CheckpointReader& reader, const config::ParsedArgs& parsed) {
  const std::string to = parsed.has("to") ? parsed.flags.at("to") : "";
  if (to != "state_dict") {
    throw ConfigError("ckpt export: --to state_dict is the one export format (got '" + to +
                      "'); a TorchScript export needs the model in Python, see docs/checkpoint-format.md");
  }
  if (!parsed.has("out")) throw ConfigError("ckpt export: --out FILE.pt is required");
  const std::string out = parsed.flags.at("out");
  c10::Dict<std::string, at::Tensor> state;
  for (const auto& [name, tensor] : reader.read_group("model")) state.insert(name, tensor);
  if (state.empty()) throw CheckpointError(reader.path() + ": has no /model tensors to export");
  const std::vector<char> bytes = torch_save_bytes(state);
  const std::string temp = out + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream file(temp, std::ios::binary);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!file) throw Error("ckpt export: cannot write " + temp + " (check --out and free space)", ExitCode::kUsage);
  }
  sys::publish_atomically(temp, out);
  std::cout << "exported " << state.size() << " tensor(s) of model " << reader.meta().model_name << " to " << out
            << "\n";
  return 0;
}

}  // namespace

int run_ckpt(const Args& args) {
  const std::vector<config::Flag> flags{{"to", true, ""}, {"out", true, ""}};
  if (wants_help(args)) {
    std::cout << kUsage;
    return 0;
  }
  const config::ParsedArgs parsed = config::parse_args(args, flags, /*with_options=*/false, false);
  const std::string action = parsed.positionals.empty() ? "" : parsed.positionals.front();
  if (action != "inspect" && action != "verify" && action != "export") {
    throw ConfigError("ckpt: expected 'inspect', 'verify' or 'export' (see hpctrain ckpt --help)");
  }
  if (parsed.positionals.size() != 2) throw ConfigError("ckpt " + action + ": give one checkpoint FILE");
  const ckpt::CheckpointReader reader(parsed.positionals[1]);
  if (action == "inspect") return inspect(reader);
  if (action == "verify") return verify(reader);
  return export_state_dict(reader, parsed);
}

}  // namespace hpctrain::cli
