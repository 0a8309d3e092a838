// A state_dict saved by Python's torch.save (the zip format of PyTorch 1.6 and later), read without
// Python: a restricted unpickler, like torch.load(weights_only=True), that knows only a dict of
// tensors (collections.OrderedDict, torch._utils._rebuild_tensor_v2/_rebuild_parameter and the
// storage types) and refuses every other global. Each tensor's storage is checked to hold its
// shape, strides and offset before it is viewed. Depends on ckpt (NamedTensors) and ATen.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "hpctrain/ckpt/checkpoint.h"

namespace hpctrain::weights {

// The file's tensors in the dict's order. Throws CheckpointError naming the file.
ckpt::NamedTensors read_pytorch_state_dict(const std::string& path);

// The same for the bytes of data.pkl, with `storage(key, dtype, numel)` giving each storage's
// tensor (the fuzz target's entry point; the file reader's storages come from the zip).
using StorageLoader = std::function<at::Tensor(const std::string& key, at::ScalarType dtype, std::int64_t numel)>;
ckpt::NamedTensors unpickle_state_dict(const std::uint8_t* data, std::int64_t size, const StorageLoader& storage,
                                       const std::string& where);

}  // namespace hpctrain::weights
