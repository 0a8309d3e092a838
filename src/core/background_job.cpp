#include "hpctrain/core/background_job.h"

#include <utility>

namespace hpctrain {

BackgroundJob::~BackgroundJob() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundJob::start(std::function<void()> job) {
  wait();
  finished_ = false;
  thread_ = std::thread([this, job = std::move(job)] {
    try {
      job();
    } catch (...) {
      error_ = std::current_exception();
    }
    finished_ = true;
  });
}

void BackgroundJob::wait() {
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void BackgroundJob::rethrow_if_failed() {
  if (thread_.joinable() && finished_) wait();
}

}  // namespace hpctrain
