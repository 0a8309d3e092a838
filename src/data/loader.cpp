#include "hpctrain/data/loader.h"

#include <algorithm>

#include "hpctrain/core/error.h"

namespace hpctrain::data {

// Note [Hand-off]: passing a batch to a thread that sleeps costs a futex wake and a context
// switch, several microseconds: as much as reading a 64-sample batch from memory (perf once put a
// third of `bench data`'s cycles there). So a side that had to wait sleeps until a run of
// handoff_ batches can pass: the training thread until handoff_ consecutive steps are ready (or
// the rest of the epoch, or a reader failed); the readers may read the steps below room_limit_,
// which next() moves to taken_ + depth_ only each time it has taken handoff_ more batches. A run
// is handoff_bytes (1 MiB) of batches: once the first batch shows its size, handoff_ becomes that
// many batches (at most depth_ / 2) and small batches are read further ahead than `depth` asks,
// two runs (fashion-mnist, 64 samples: runs of 21 batches, 42 ahead; kMaxDepth at most).
// No side waits for the other for ever: next() waits for steps below taken_ + handoff_, and
// room_limit_ = t + depth_ for the last multiple t of handoff_ taken, so room_limit_ >= taken_ -
// handoff_ + 1 + depth_ >= taken_ + handoff_ + 1 when depth_ >= 2 handoff_. The sizing happens
// with the first batch, while taken_ is 0, so no multiple changes meaning.
namespace {
constexpr size_t kMaxDepth = 1024;
}  // namespace

Loader::Loader(ReadStep read, size_t steps, LoaderOptions options)
    : read_(std::move(read)), steps_(steps),
      depth_(options.depth > 0 ? static_cast<size_t>(std::max(options.depth, options.threads)) : 0),
      threads_(static_cast<size_t>(std::max(options.threads, 1))), handoff_bytes_(options.handoff_bytes),
      room_limit_(depth_) {
  HT_CHECK(options.handoff_bytes >= 0, "LoaderOptions::handoff_bytes must be >= 0");
  if (depth_ == 0) return;
  try {
    for (size_t t = 0; t < std::min(threads_, steps_); ++t) {
      workers_.emplace_back([this, t] { produce(t); });
    }
  } catch (...) {
    stop_workers();  // a thread that could not start: the started ones must not outlive *this
    throw;
  }
}

Loader::Loader(ReadBatch read, std::vector<std::vector<std::int64_t>> steps, LoaderOptions options)
    : Loader(std::make_shared<const Steps>(std::move(steps)), std::move(read), options) {}

Loader::Loader(std::shared_ptr<const Steps> steps, ReadBatch read, LoaderOptions options)
    : Loader([steps, read = std::move(read)](size_t i) { return read((*steps)[i]); }, steps->size(), options) {}

Loader::Loader(Split split, std::vector<std::vector<std::int64_t>> steps, LoaderOptions options)
    : Loader([split](const std::vector<std::int64_t>& indices) { return split.gather(indices); },
             std::move(steps), options) {}

Loader::~Loader() { stop_workers(); }

void Loader::stop_workers() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  room_.notify_all();
  for (auto& worker : workers_) worker.join();
  workers_.clear();
}

// No reader waits for room yet: each reads its first step (below threads <= depth_) before it can.
void Loader::size_runs(const Batch& first) {
  sized_ = true;
  if (handoff_bytes_ == 0) return;
  const std::int64_t bytes = std::max<std::int64_t>(1, first.input.nbytes() + first.target.nbytes());
  const auto run = static_cast<size_t>((handoff_bytes_ + bytes - 1) / bytes);
  depth_ = std::max(depth_, std::min(2 * run, kMaxDepth));
  handoff_ = std::max<size_t>(1, std::min(run, depth_ / 2));
  room_limit_ = taken_ + depth_;
}

bool Loader::worth_waking_consumer() const {
  if (error_) return ready_run_ > 0 || error_step_ == taken_;
  return ready_run_ >= handoff_ || (ready_run_ > 0 && taken_ + ready_run_ == steps_);
}

void Loader::produce(size_t first_step) {
  for (size_t i = first_step; i < steps_; i += threads_) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      room_.wait(lock, [&] { return stop_ || i < room_limit_; });
      if (stop_) return;
    }
    bool wake = false;
    bool failed = false;
    try {
      Batch batch = read_(i);
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!sized_) size_runs(batch);
      ready_.emplace(i, std::move(batch));
      while (ready_.count(taken_ + ready_run_) > 0) ++ready_run_;
      wake = consumer_waiting_ && worth_waking_consumer();
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!error_ || i < error_step_) {  // the earliest failing step is the one next() reaches
        error_ = std::current_exception();
        error_step_ = i;
      }
      wake = consumer_waiting_ && worth_waking_consumer();
      failed = true;
    }
    if (wake) ready_changed_.notify_one();  // only the training thread waits on it
    if (failed) return;
  }
}

Batch Loader::next() {
  HT_CHECK(taken_ < steps_, "Loader::next called past the last step");
  if (workers_.empty()) return read_(taken_++);  // depth 0: no threads
  std::unique_lock<std::mutex> lock(mutex_);
  if (ready_run_ == 0) {
    consumer_waiting_ = true;
    ready_changed_.wait(lock, [&] { return worth_waking_consumer(); });
    consumer_waiting_ = false;
  }
  if (ready_run_ == 0) std::rethrow_exception(error_);
  const auto found = ready_.find(taken_);
  Batch batch = std::move(found->second);
  ready_.erase(found);
  ++taken_;
  --ready_run_;
  const bool more_room = taken_ % handoff_ == 0;
  if (more_room) room_limit_ = taken_ + depth_;
  lock.unlock();
  if (more_room) room_.notify_all();
  return batch;
}

}  // namespace hpctrain::data
