// One job at a time on a background thread: the checkpoint writer of ckpt.async. start() waits
// for the job before it, so at most one is in flight; wait() and rethrow_if_failed() hand the
// job's exception to the caller's thread, so a failed background write ends the run like a
// synchronous one. Depends on std only.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <thread>

namespace hpctrain {

class BackgroundJob {
 public:
  BackgroundJob() = default;
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;
  // Waits for a job in flight; its exception, if nobody collected it, is dropped.
  ~BackgroundJob();

  // Waits for the previous job (rethrowing its exception), then runs `job` on a new thread.
  void start(std::function<void()> job);
  // Waits for the job in flight, if any; rethrows its exception.
  void wait();
  // Without waiting: rethrows the exception of a job that has already failed.
  void rethrow_if_failed();
  bool busy() const { return thread_.joinable() && !finished_; }

 private:
  std::thread thread_;
  std::atomic<bool> finished_{false};
  std::exception_ptr error_;  // written by the job's thread before finished_
};

}  // namespace hpctrain
