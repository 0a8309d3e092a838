#include "hpctrain/data/loader.h"

#include "hpctrain/core/error.h"

namespace hpctrain::data {

Loader::Loader(Split split, std::vector<std::vector<std::int64_t>> steps, int depth)
    : split_(std::move(split)), steps_(std::move(steps)), depth_(depth > 0 ? static_cast<size_t>(depth) : 0) {
  if (depth_ > 0) thread_ = std::thread([this] { produce(); });
}

Loader::~Loader() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Loader::produce() {
  for (size_t i = 0; i < steps_.size(); ++i) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || ready_.size() < depth_; });
      if (stop_) return;
    }
    try {
      Batch batch = split_.gather(steps_[i]);
      const std::lock_guard<std::mutex> lock(mutex_);
      ready_.push_back(std::move(batch));
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    changed_.notify_all();
  }
}

Batch Loader::next() {
  HT_CHECK(taken_ < steps_.size(), "Loader::next called past the last step");
  if (depth_ == 0) return split_.gather(steps_[taken_++]);
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || error_ != nullptr; });
  if (ready_.empty()) std::rethrow_exception(error_);  // batches read before the error come first
  Batch batch = std::move(ready_.front());
  ready_.pop_front();
  ++taken_;
  lock.unlock();
  changed_.notify_all();
  return batch;
}

}  // namespace hpctrain::data
