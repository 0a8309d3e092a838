#include "hpctrain/data/loader.h"

#include <algorithm>

#include "hpctrain/core/error.h"

namespace hpctrain::data {

// Note [Hand-off]: passing a batch to a thread that sleeps costs a futex wake and a context
// switch, several microseconds: as much as reading a 64-sample batch from memory (perf once put a
// third of `bench data`'s cycles there). So a side that had to wait sleeps until a run of
// handoff_ batches can pass: the training thread until handoff_ consecutive steps are ready (or
// the rest of the epoch, or a reader failed), a reading thread until next() has taken a multiple
// of handoff_ batches, and nobody is notified before that. A run is handoff_bytes (1 MiB) at
// least, so once the first batch shows its size, small batches are read further ahead than
// `depth` asks: depth_ becomes at least two runs (fashion-mnist, 64 samples: 42 batches, 2 MiB),
// and handoff_ is depth_ / 2. No side can wait for the other for ever: next() waits for at most handoff_ <=
// depth_ batches, which the readers may read ahead; a reader waits for step i only while
// i >= taken_ + depth_, and by the time next() waits for step i it has taken at least
// depth_ - handoff_ + 1 >= handoff_ batches since, so it woke that reader (as does a change of
// depth_).
Loader::Loader(ReadBatch read, std::vector<std::vector<std::int64_t>> steps, LoaderOptions options)
    : read_(std::move(read)), steps_(std::move(steps)),
      depth_(options.depth > 0 ? static_cast<size_t>(std::max(options.depth, options.threads)) : 0),
      threads_(static_cast<size_t>(std::max(options.threads, 1))),
      handoff_(std::max<size_t>(1, depth_ / 2)), handoff_bytes_(options.handoff_bytes) {
  if (depth_ == 0) return;
  for (size_t t = 0; t < std::min(threads_, steps_.size()); ++t) {
    workers_.emplace_back([this, t] { produce(t); });
  }
}

Loader::Loader(Split split, std::vector<std::vector<std::int64_t>> steps, LoaderOptions options)
    : Loader([split](const std::vector<std::int64_t>& indices) { return split.gather(indices); },
             std::move(steps), options) {}

Loader::~Loader() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  room_.notify_all();
  for (auto& worker : workers_) worker.join();
}

bool Loader::worth_waking_consumer() const {
  if (error_) return ready_.count(taken_) > 0 || error_step_ == taken_;
  size_t run = 0;
  for (auto it = ready_.find(taken_); run < handoff_ && it != ready_.end() && it->first == taken_ + run; ++it) ++run;
  return run == handoff_ || (run > 0 && taken_ + run == steps_.size());
}

void Loader::size_runs(const Batch& batch) {
  const std::int64_t bytes = std::max<std::int64_t>(1, batch.input.nbytes() + batch.target.nbytes());
  depth_ = std::max(depth_, static_cast<size_t>(2 * ((handoff_bytes_ + bytes - 1) / bytes)));
  handoff_ = std::max<size_t>(1, depth_ / 2);
  sized_ = true;
}

void Loader::produce(size_t first_step) {
  for (size_t i = first_step; i < steps_.size(); i += threads_) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      room_.wait(lock, [&] { return stop_ || i < taken_ + depth_; });
      if (stop_) return;
    }
    bool wake = false;
    bool failed = false;
    try {
      Batch batch = read_(steps_[i]);
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!sized_) {
        size_runs(batch);
        room_.notify_all();
      }
      ready_.emplace(i, std::move(batch));
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
  HT_CHECK(taken_ < steps_.size(), "Loader::next called past the last step");
  if (workers_.empty()) return read_(steps_[taken_++]);  // depth 0: no threads
  std::unique_lock<std::mutex> lock(mutex_);
  if (ready_.count(taken_) == 0) {
    consumer_waiting_ = true;
    ready_changed_.wait(lock, [&] { return worth_waking_consumer(); });
    consumer_waiting_ = false;
  }
  const auto found = ready_.find(taken_);
  if (found == ready_.end()) std::rethrow_exception(error_);
  Batch batch = std::move(found->second);
  ready_.erase(found);
  ++taken_;
  const bool wake = taken_ % handoff_ == 0;
  lock.unlock();
  if (wake) room_.notify_all();  // the threads of the next handoff_ steps may go on
  return batch;
}

}  // namespace hpctrain::data
