// Reads an epoch's batches ahead of the training loop: a background thread gathers the batches of
// a known list of steps, in order, keeping up to `depth` of them ready. While a Loader runs, its
// thread is the only user of HDF5 (see io/h5_file.h); the trainer drains or destroys it before
// evaluating. Depends on data/split and std threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "hpctrain/data/split.h"

namespace hpctrain::data {

class Loader {
 public:
  // `steps[i]`: the sample indices of step i. depth 0 reads each batch in next(), on the caller's
  // thread; depth >= 1 prefetches that many batches on a background thread.
  Loader(Split split, std::vector<std::vector<std::int64_t>> steps, int depth);
  ~Loader();  // stops the thread (batches not taken are dropped)
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next step's batch; blocks until it is read. Rethrows an error of the reading thread.
  // Calling it more often than there are steps is an internal error.
  Batch next();

 private:
  void produce();

  Split split_;
  std::vector<std::vector<std::int64_t>> steps_;
  size_t depth_;
  size_t taken_ = 0;  // batches handed out by next()

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hpctrain::data
