// Hugging Face's GPT-2 names and layout against hpctrain's gpt. Hugging Face stores
// transformer.h.N.attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj as Conv1D, whose weight is
// [in, out], the transpose of a Linear's; the output layer lm_head is wte's weight (tied); files
// saved from GPT2Model lack the "transformer." prefix; and older files hold each block's causal
// mask (attn.bias, attn.masked_bias), which is not a weight. Depends on ckpt's NamedTensors.
#pragma once

#include <string>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/config/config.h"

namespace hpctrain::weights {

// What `tensors` are named in: hf-gpt2 when they hold a GPT-2 attention weight in Conv1D layout
// or lack the "transformer." prefix of a gpt's names, else hpctrain.
config::InitNames detect_names(const ckpt::NamedTensors& tensors);

// Hugging Face GPT-2 tensors renamed (and transposed) into hpctrain's gpt names. `dropped` gets
// the names that are not weights (the causal masks) and lm_head.weight, which must equal wte's
// (hpctrain's gpt ties them); an untied lm_head is a CheckpointError naming `path`.
ckpt::NamedTensors from_hf_gpt2(const ckpt::NamedTensors& tensors, const std::string& path,
                                std::vector<std::string>& dropped);

// hpctrain gpt tensors renamed (and transposed) into Hugging Face's GPT2LMHeadModel names, with
// lm_head.weight a copy of wte's so a strict load_state_dict accepts the file.
ckpt::NamedTensors to_hf_gpt2(const ckpt::NamedTensors& tensors);

}  // namespace hpctrain::weights
