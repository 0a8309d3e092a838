#include "hpctrain/observe/mfu.h"

#include <fmt/format.h>

#include <vector>

namespace hpctrain::observe {
namespace {

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

// NVIDIA's data sheets, dense bf16/fp16 tensor TFLOP/s (the sparse figures they lead with are twice
// these). The first entry whose parts all occur in the name wins, so variants come first.
struct KnownGpu {
  std::vector<const char*> parts;
  double tflops;
};
const std::vector<KnownGpu>& known_gpus() {
  static const std::vector<KnownGpu> gpus{
      {{"GH200"}, 989.4},         {{"H200", "NVL"}, 835.5}, {{"H200"}, 989.4},
      {{"H100", "PCIe"}, 756.5},  {{"H100", "NVL"}, 835.5}, {{"H100"}, 989.4},
      {{"A100"}, 312.0},          {{"B200"}, 2250.0},
  };
  return gpus;
}

}  // namespace

std::optional<double> known_gpu_peak_tflops(const std::string& gpu_name) {
  for (const KnownGpu& gpu : known_gpus()) {
    bool all = true;
    for (const char* part : gpu.parts) all = all && contains(gpu_name, part);
    if (all) return gpu.tflops;
  }
  return std::nullopt;
}

std::optional<PeakFlops> resolve_peak_flops(double option, const std::string& gpu_name,
                                            config::Precision precision, bool tf32) {
  if (option > 0) return PeakFlops{option, "train.peak_tflops"};
  const bool half = precision != config::Precision::kFp32;
  if (!half && !tf32) return std::nullopt;
  const std::optional<double> known = known_gpu_peak_tflops(gpu_name);
  if (!known) return std::nullopt;
  // Every GPU of the table runs TF32 at half its bf16/fp16 tensor rate (their data sheets).
  return PeakFlops{half ? *known : *known / 2, fmt::format("{}, dense {}", gpu_name, half ? config::name_of(precision) : "tf32")};
}

}  // namespace hpctrain::observe
