#include "hpctrain/runtime/checkpoint_room.h"

#include <torch/nn/module.h>

#include <filesystem>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/core/log.h"
#include "hpctrain/model/lora.h"

namespace hpctrain::runtime {
namespace {

// The optimizer's state per trainable element, in copies of the parameter.
int moments(const config::OptimConfig& optim) {
  if (optim.name == config::OptimizerName::kAdamW) return 2;
  return optim.momentum > 0 ? 1 : 0;
}

}  // namespace

std::int64_t checkpoint_bytes_estimate(const config::Config& config, model::Model& model) {
  const std::int64_t copies = 1 + moments(config.optim) + (config.train.ema_decay > 0 ? 1 : 0);
  bool adapters = false;
  for (const auto& p : model.module().named_parameters()) adapters = adapters || model::is_adapter_parameter(p.key());
  std::int64_t bytes = 0;
  for (const auto& p : model.module().named_parameters()) {
    const auto size = static_cast<std::int64_t>(p.value().nbytes());
    if (p.value().requires_grad()) {
      bytes += copies * size;
    } else if (!adapters) {
      bytes += size;
    }
  }
  for (const auto& b : model.module().named_buffers()) bytes += static_cast<std::int64_t>(b.value().nbytes());
  return bytes;
}

std::int64_t checkpoint_bytes(const std::string& checkpoints_dir, std::int64_t estimate) {
  const std::string latest = ckpt::latest_checkpoint(checkpoints_dir);
  std::error_code ec;
  const auto size = latest.empty() ? 0 : std::filesystem::file_size(latest, ec);
  return latest.empty() || ec ? estimate : static_cast<std::int64_t>(size);
}

void warn_if_checkpoints_do_not_fit(const std::string& checkpoints_dir, std::int64_t bytes) {
  std::error_code ec;
  const std::filesystem::space_info space = std::filesystem::space(checkpoints_dir, ec);
  if (ec || static_cast<std::int64_t>(space.available) >= 2 * bytes) return;
  constexpr double kMB = 1e6;
  log::warn("run.dir: {} has {:.1f} MB free, less than two checkpoints of about {:.1f} MB (the last is kept while "
            "the next is written): the first checkpoint that does not fit stops the run; free space there or set "
            "run.dir on a larger file system",
            checkpoints_dir, static_cast<double>(space.available) / kMB, static_cast<double>(bytes) / kMB);
}

}  // namespace hpctrain::runtime
