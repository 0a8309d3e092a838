// Note [Rank watch]: a collective times out (dist.timeout_s), but a timeout cannot say which rank
// is missing, and not everything a rank waits in has one: the control plane's barriers (a
// checkpoint write may rightly take longer than the timeout) and its agreement at step
// boundaries. So every rank's watch thread sends a small heartbeat to the next rank (rank+1 mod
// W) several times per timeout, carrying what its training thread is doing (core/activity.h),
// and listens to the previous one. A rank that hears nothing from the previous rank for
// dist.timeout_s names it, with its last report, and ends the job (exit code 5): it died, is
// stopped, or its node or the network failed. A rank that is merely busy (a long checkpoint
// write) keeps beating, since the thread is not the training thread. The watch also catches its
// own rank stuck waiting for the loader past the timeout (a hung file system), which heartbeats
// cannot show. A rank that ends normally says goodbye, and the next stops listening.
// Private to src/comm; needs MPI_THREAD_MULTIPLE.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "hpctrain/comm/bootstrap.h"

namespace hpctrain::comm {

class RankWatch {
 public:
  // Collective over `world` (duplicated for the heartbeats). Starts the thread.
  RankWatch(MPI_Comm world, const Topology& topology, double timeout_s);
  // Stops the thread; on a normal end (not while an exception unwinds: the job is being aborted)
  // first tells the next rank that this one leaves.
  ~RankWatch();
  RankWatch(const RankWatch&) = delete;
  RankWatch& operator=(const RankWatch&) = delete;

  // "; rank 1's last report, 0.3 s ago: step 12, waiting for the loader for 2.9 s, 56 collectives
  // issued": what the previous rank last said, for a collective's timeout message; "" before any
  // report or without a watch. Thread-safe.
  static std::string previous_rank_report();

 private:
  void watch();

  MPI_Comm comm_ = MPI_COMM_NULL;
  Topology topology_;
  double timeout_s_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stop_ = false;
  bool say_goodbye_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

}  // namespace hpctrain::comm
