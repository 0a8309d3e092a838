#include "hpctrain/core/background_job.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <vector>

namespace hpctrain {
namespace {

TEST(BackgroundJob, RunsOneJobAtATimeInOrder) {
  std::vector<int> done;
  BackgroundJob job;
  job.start([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    done.push_back(1);
  });
  job.start([&] { done.push_back(2); });  // waits for the first
  job.wait();
  EXPECT_EQ(done, (std::vector<int>{1, 2}));
  EXPECT_FALSE(job.busy());
}

TEST(BackgroundJob, AFailedJobsErrorReachesTheNextWaitOrStartOnce) {
  BackgroundJob job;
  job.start([] { throw std::runtime_error("disk full"); });
  EXPECT_THROW(job.wait(), std::runtime_error);
  EXPECT_NO_THROW(job.wait());
  job.start([] { throw std::runtime_error("disk full"); });
  EXPECT_THROW(job.start([] {}), std::runtime_error);
}

TEST(BackgroundJob, RethrowIfFailedNeverWaitsForARunningJob) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  BackgroundJob job;
  job.start([released] {
    released.wait();
    throw std::runtime_error("late failure");
  });
  EXPECT_TRUE(job.busy());
  EXPECT_NO_THROW(job.rethrow_if_failed());  // would block forever if it waited
  release.set_value();
  while (job.busy()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_THROW(job.rethrow_if_failed(), std::runtime_error);
  EXPECT_NO_THROW(job.rethrow_if_failed());
}

TEST(BackgroundJob, DestructionWaitsForTheJob) {
  bool finished = false;
  {
    BackgroundJob job;
    job.start([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      finished = true;
    });
  }
  EXPECT_TRUE(finished);
}

// A job hung (as on a file system) must not hold up an error on its way to main(): destroyed while
// an exception unwinds, the BackgroundJob leaves the job running, which later finishes without
// touching the destroyed object.
TEST(BackgroundJob, DestructionDuringAnExceptionLeavesARunningJobBehind) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  const auto finished = std::make_shared<std::atomic<bool>>(false);
  try {
    BackgroundJob job;
    job.start([released, finished] {
      released.wait();
      *finished = true;
    });
    throw std::runtime_error("the run failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(*finished);  // not waited for
  release.set_value();
  for (int i = 0; i < 5000 && !*finished; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(*finished);
}

}  // namespace
}  // namespace hpctrain
