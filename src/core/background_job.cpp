#include "hpctrain/core/background_job.h"

#include <utility>

namespace hpctrain {

BackgroundJob::~BackgroundJob() {
  if (!thread_.joinable()) return;
  if (std::uncaught_exceptions() > 0 && !outcome_->finished) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

void BackgroundJob::start(std::function<void()> job) {
  wait();
  outcome_->finished = false;
  thread_ = std::thread([outcome = outcome_, job = std::move(job)] {
    try {
      job();
    } catch (...) {
      outcome->error = std::current_exception();
    }
    outcome->finished = true;
  });
}

void BackgroundJob::wait() {
  if (thread_.joinable()) thread_.join();
  if (outcome_->error) std::rethrow_exception(std::exchange(outcome_->error, nullptr));
}

void BackgroundJob::rethrow_if_failed() {
  if (thread_.joinable() && outcome_->finished) wait();
}

}  // namespace hpctrain
