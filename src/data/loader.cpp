#include "hpctrain/data/loader.h"

#include <algorithm>

#include "hpctrain/core/error.h"

namespace hpctrain::data {

Loader::Loader(ReadBatch read, std::vector<std::vector<std::int64_t>> steps, LoaderOptions options)
    : read_(std::move(read)), steps_(std::move(steps)),
      depth_(options.depth > 0 ? static_cast<size_t>(std::max(options.depth, options.threads)) : 0),
      threads_(static_cast<size_t>(std::max(options.threads, 1))) {
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

void Loader::produce(size_t first_step) {
  for (size_t i = first_step; i < steps_.size(); i += threads_) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      room_.wait(lock, [&] { return stop_ || i < taken_ + depth_; });
      if (stop_) return;
    }
    try {
      Batch batch = read_(steps_[i]);
      const std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(i, std::move(batch));
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!error_ || i < error_step_) {  // the earliest failing step is the one next() reaches
        error_ = std::current_exception();
        error_step_ = i;
      }
      ready_changed_.notify_one();
      return;
    }
    ready_changed_.notify_one();  // only the training thread waits on it
  }
}

Batch Loader::next() {
  HT_CHECK(taken_ < steps_.size(), "Loader::next called past the last step");
  if (depth_ == 0) return read_(steps_[taken_++]);
  std::unique_lock<std::mutex> lock(mutex_);
  ready_changed_.wait(lock, [&] { return ready_.count(taken_) > 0 || (error_ && error_step_ == taken_); });
  const auto found = ready_.find(taken_);
  if (found == ready_.end()) std::rethrow_exception(error_);
  Batch batch = std::move(found->second);
  ready_.erase(found);
  ++taken_;
  lock.unlock();
  room_.notify_all();  // the thread of step taken_ + depth - 1 may go on
  return batch;
}

}  // namespace hpctrain::data
