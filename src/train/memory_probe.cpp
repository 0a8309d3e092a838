#include "memory_probe.h"

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>

namespace hpctrain::train {

namespace {

// Allocations and frees of this thread while installed, as the profiler's memory hook sees them.
// Both signatures: libtorch 1.x reports totals as int64_t, 2.x as size_t; the one that matches
// overrides, the other is never called. No `override`, so either compiles.
class AllocationMeter : public c10::MemoryReportingInfoBase {
 public:
  virtual void reportMemoryUsage(void* /*ptr*/, std::int64_t bytes, std::int64_t /*allocated*/,
                                 std::int64_t /*reserved*/, c10::Device /*device*/) {
    count(bytes);
  }
  virtual void reportMemoryUsage(void* /*ptr*/, std::int64_t bytes, size_t /*allocated*/, size_t /*reserved*/,
                                 c10::Device /*device*/) {
    count(bytes);
  }
  virtual bool memoryProfilingEnabled() const { return true; }

  std::int64_t now() const { return now_; }
  std::int64_t peak() const { return peak_; }

 private:
  void count(std::int64_t bytes) {
    now_ += bytes;
    peak_ = std::max(peak_, now_);
  }
  std::int64_t now_ = 0;
  std::int64_t peak_ = 0;
};

std::int64_t batch_bytes(const data::Batch& batch) {
  std::int64_t bytes = 0;
  for (const at::Tensor* t : {&batch.input, &batch.target, &batch.weight}) {
    if (t->defined()) bytes += static_cast<std::int64_t>(t->nbytes());
  }
  return bytes;
}

// The bytes of a batch of `items` (the first of the split), not per item.
ItemBytes measure(model::Model* model, const Objective& objective, const data::Source& source, c10::Device device,
                  std::int64_t items) {
  ItemBytes measured;
  const data::Batch read = source.read_items(0, items);
  measured.read = batch_bytes(read);
  const data::Batch finished = source.finish(read, device);
  measured.on_device = batch_bytes(finished);
  if (model == nullptr) return measured;
  {
    const auto meter = std::make_shared<AllocationMeter>();
    const c10::DebugInfoGuard metering(c10::DebugInfoKind::PROFILER_STATE, meter);
    const Prediction prediction = objective.predict(*model, finished);
    measured.kept = meter->now();
  }
  {
    const auto meter = std::make_shared<AllocationMeter>();
    const c10::DebugInfoGuard metering(c10::DebugInfoKind::PROFILER_STATE, meter);
    const torch::NoGradGuard no_grad;
    const Prediction prediction = objective.predict(*model, finished);
    measured.peak_no_grad = meter->peak();
  }
  return measured;
}

std::int64_t per_item(std::int64_t one, std::int64_t few, std::int64_t items) {
  if (items <= 1) return std::max<std::int64_t>(0, one);
  return std::max<std::int64_t>(0, (few - one) / (items - 1));
}

}  // namespace

ItemBytes probe_item_bytes(model::Model* model, const Objective& objective, const data::Source& source,
                           c10::Device device) {
  constexpr std::int64_t kFewItems = 4;
  const std::int64_t few_items = std::min(kFewItems, source.items());
  const bool was_training = model != nullptr && model->module().is_training();
  if (model != nullptr) model->module().eval();
  const ItemBytes one = measure(model, objective, source, device, 1);
  const ItemBytes few = few_items > 1 ? measure(model, objective, source, device, few_items) : one;
  if (model != nullptr) model->module().train(was_training);
  return {per_item(one.read, few.read, few_items), per_item(one.on_device, few.on_device, few_items),
          per_item(one.kept, few.kept, few_items), per_item(one.peak_no_grad, few.peak_no_grad, few_items)};
}

}  // namespace hpctrain::train
