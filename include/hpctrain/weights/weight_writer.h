// Writes named tensors as a weights file other tools read: safetensors (Hugging Face's format; the
// metadata gets "format": "pt", which transformers asks for) or a torch.save state_dict that
// torch.load reads, weights_only included. Atomic: a temporary file, fsynced, renamed. Depends on
// io, ckpt (NamedTensors) and ATen.
#pragma once

#include <map>
#include <string>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/weights/weight_file.h"

namespace hpctrain::weights {

// kCheckpoint is not a format to write here (hpctrain writes checkpoints itself). Throws
// Error(kUsage) naming `path` when it cannot be written, ConfigError for a dtype the format lacks.
void write_weights(const std::string& path, const ckpt::NamedTensors& tensors, WeightFormat format,
                   std::map<std::string, std::string> metadata);

}  // namespace hpctrain::weights
