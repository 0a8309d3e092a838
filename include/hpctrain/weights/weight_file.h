// Named tensors from a file of weights a user hands in: a safetensors file (its tensors are views
// of the file's memory map, never copied), a Hugging Face model directory (weights/hf_directory.h),
// a PyTorch state_dict saved with torch.save, or an hpctrain checkpoint (its /model group). The
// format is told by the file's first bytes.
// Depends on io, ckpt and ATen.
#pragma once

#include <memory>
#include <string>

#include "hpctrain/ckpt/checkpoint.h"

namespace hpctrain::weights {

enum class WeightFormat { kSafetensors, kPytorch, kCheckpoint, kHfDirectory };

const char* name_of(WeightFormat format);

class WeightFile {
 public:
  // Opens and checks `path`. Throws CheckpointError (exit 4) naming the file for anything it
  // cannot read.
  static WeightFile open(const std::string& path);

  const std::string& path() const { return path_; }
  WeightFormat format() const { return format_; }
  // As stored, in the file's order and dtypes; read-only (a safetensors tensor is the mapped file).
  const ckpt::NamedTensors& tensors() const { return tensors_; }
  // What keeps the tensors' memory (a mapping) alive, for whoever holds them longer than the file.
  std::shared_ptr<const void> mapping() const { return keep_alive_; }

 private:
  WeightFile() = default;

  std::string path_;
  WeightFormat format_ = WeightFormat::kSafetensors;
  std::shared_ptr<const void> keep_alive_;  // the mapping the tensors view
  ckpt::NamedTensors tensors_;
};

}  // namespace hpctrain::weights
