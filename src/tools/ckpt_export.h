// What `hpctrain ckpt export` shares between its file formats (ckpt_command.cpp) and the Hugging
// Face model directory it writes (hf_export.cpp).
#pragma once

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/config/config.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/weights/lora_base.h"

namespace hpctrain::cli {

// The whole model of a LoRA checkpoint with its adapters folded into the base weights, in float32.
ckpt::NamedTensors merged_weights(const ckpt::CheckpointReader& reader, const config::Config& config,
                                  weights::Weights which);

// `tensors` of the model group with the moving average's (the ema group) in place of the trained
// weights of the same names.
ckpt::NamedTensors averaged(const ckpt::CheckpointReader& reader, ckpt::NamedTensors tensors);

// `ckpt export FILE --format hf --out DIR`: a llama checkpoint as a Hugging Face model directory
// (config.json, safetensors shards and their index), or a LoRA run's as a PEFT adapter directory.
int export_hf_directory(const ckpt::CheckpointReader& reader, const config::ParsedArgs& parsed);

}  // namespace hpctrain::cli
