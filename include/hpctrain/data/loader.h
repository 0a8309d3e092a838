// Reads an epoch's batches ahead of the training loop: background threads gather the batches of a
// known list of steps, keeping up to `depth` of them ready or in flight, and next() hands them out
// in step order. Thread t of N reads steps t, t+N, t+2N, ... The read function must be safe to call
// from several threads (Split::gather and TokenStream::gather are: io serializes their HDF5 calls,
// rows are copied in parallel). A side that had to wait sleeps until it can hand over several
// batches (Note [Hand-off] in loader.cpp). Depends on data/split and std threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "hpctrain/data/split.h"

namespace hpctrain::data {

struct LoaderOptions {
  int depth = 2;    // batches ready or being read ahead of next(); 0: read in next(), no threads
  int threads = 1;  // reading threads (with depth >= 1); depth is raised to at least this
  // Bytes of batches a waiting side waits for (Note [Hand-off] in loader.cpp); depth is raised
  // to hold two such runs. 0: one batch, and depth as it is.
  std::int64_t handoff_bytes = std::int64_t{1} << 20;
};

class Loader {
 public:
  using ReadStep = std::function<Batch(size_t step)>;
  using ReadBatch = std::function<Batch(const std::vector<std::int64_t>& indices)>;

  // `read(i)` reads step i's batch, for i in [0, steps).
  Loader(ReadStep read, size_t steps, LoaderOptions options);
  // `steps[i]`: the indices `read` turns into step i's batch.
  Loader(ReadBatch read, std::vector<std::vector<std::int64_t>> steps, LoaderOptions options);
  // Reads `split` with Split::gather.
  Loader(Split split, std::vector<std::vector<std::int64_t>> steps, LoaderOptions options);
  ~Loader();  // stops the threads (batches not taken are dropped)
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next step's batch; blocks until it is read. Rethrows the error of a reading thread when
  // the step it failed on is reached (the batches before it come first). Calling it more often
  // than there are steps is an internal error.
  Batch next();

 private:
  using Steps = std::vector<std::vector<std::int64_t>>;
  Loader(std::shared_ptr<const Steps> steps, ReadBatch read, LoaderOptions options);
  void produce(size_t first_step);
  void stop_workers();
  void size_runs(const Batch& first);  // caller holds mutex_
  bool worth_waking_consumer() const;  // caller holds mutex_

  ReadStep read_;
  size_t steps_;
  size_t depth_;  // batches ready or being read, at most; raised for small batches
  size_t threads_;
  std::int64_t handoff_bytes_;
  // Note [Hand-off]: what a waiting side waits for, set from the first batch read (sized_).
  size_t handoff_ = 1;
  bool sized_ = false;
  size_t room_limit_;      // the readers may read the steps below it
  size_t taken_ = 0;       // batches handed out by next()
  size_t ready_run_ = 0;   // steps from taken_ on that are ready, in a row
  bool consumer_waiting_ = false;

  std::mutex mutex_;
  std::condition_variable ready_changed_;  // batches or an error arrived (the caller waits)
  std::condition_variable room_;           // next() made room, or stop (the threads wait)
  std::map<size_t, Batch> ready_;  // by step
  std::exception_ptr error_;
  size_t error_step_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace hpctrain::data
