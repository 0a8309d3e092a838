#include "hpctrain/data/epoch_reader.h"

#include <algorithm>

#include "hpctrain/core/activity.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/timer.h"

namespace hpctrain::data {

EpochReader::EpochReader(std::shared_ptr<const Source> source, const Sampler& sampler, std::int64_t epoch,
                         std::int64_t cursor, std::int64_t accumulation, LoaderOptions options, c10::Device device)
    : source_(std::move(source)),
      plan_(std::make_shared<const std::vector<SamplerStep>>(sampler.steps(epoch, cursor))),
      accumulation_(accumulation),
      steps_((static_cast<std::int64_t>(plan_->size()) + accumulation - 1) / accumulation),
      device_(device),
      loader_([source = source_, plan = plan_, epoch](size_t i) { return source->read(epoch, (*plan)[i]); },
              plan_->size(), options) {}

StepInput EpochReader::next() {
  HT_CHECK(!done(), "EpochReader::next called past the epoch's last step");
  const std::int64_t first = taken_ * accumulation_;
  const std::int64_t count = std::min(accumulation_, static_cast<std::int64_t>(plan_->size()) - first);
  StepInput input;
  for (std::int64_t j = first; j < first + count; ++j) {
    const Timer waiting;
    const Batch batch = [&] {
      const activity::Scope loading(activity::Kind::kLoader);
      return loader_.next();
    }();
    input.wait_s += waiting.elapsed_s();
    input.micro_batches.push_back(source_->finish(batch, device_));
  }
  input.next_cursor = (*plan_)[static_cast<size_t>(first + count - 1)].next_cursor;
  ++taken_;
  return input;
}

}  // namespace hpctrain::data
