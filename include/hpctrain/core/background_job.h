// One job at a time on a background thread: the checkpoint writer of ckpt.async. start() waits
// for the job before it, so at most one is in flight; wait() and rethrow_if_failed() hand the
// job's exception to the caller's thread, so a failed background write ends the run like a
// synchronous one. Depends on std only.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <thread>

namespace hpctrain {

class BackgroundJob {
 public:
  BackgroundJob() = default;
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;
  // Waits for a job in flight (its exception, if nobody collected it, is dropped), except while an
  // exception unwinds: then a job still running is left to finish on its own, so a write hung on
  // a file system cannot keep the error from reaching main() and ending the job.
  ~BackgroundJob();

  // Waits for the previous job (rethrowing its exception), then runs `job` on a new thread.
  void start(std::function<void()> job);
  // Waits for the job in flight, if any; rethrows its exception.
  void wait();
  // Without waiting: rethrows the exception of a job that has already failed.
  void rethrow_if_failed();
  bool busy() const { return thread_.joinable() && !outcome_->finished; }

 private:
  // Shared with the job's thread, which may outlive this object (see the destructor).
  struct Outcome {
    std::atomic<bool> finished{false};
    std::exception_ptr error;  // written by the job's thread before `finished`
  };
  std::thread thread_;
  std::shared_ptr<Outcome> outcome_ = std::make_shared<Outcome>();
};

}  // namespace hpctrain
