// Note [Rank watch]: a collective times out (dist.timeout_s), but a timeout cannot say which rank
// is missing, and not everything a rank waits in has one: the control plane's barriers (a
// checkpoint write may rightly take longer than the timeout) and its agreement at step
// boundaries. So every rank's watch thread sends a small heartbeat to the next rank (rank+1 mod
// W) several times per timeout, carrying what its training thread is doing (core/activity.h),
// and listens to the previous one. A rank that hears nothing from the previous rank for
// dist.timeout_s (at least 1 s) names it, with its last report, and ends the job (exit code 5):
// it died, is stopped, or its node or the network failed. A rank that is merely busy (a long
// checkpoint write) keeps beating, since the thread is not the training thread, and so does a
// rank on its way to abort with an error of its own, so that error is the one reported. The watch
// also catches its own rank stuck past an activity's limit (activity::set_limit), which
// heartbeats cannot show: waiting for the loader for dist.timeout_s, writing a checkpoint for
// ckpt.write_timeout_s (a hung file system). A rank that ends normally says goodbye, and waits a moment for
// the previous rank's, so no message is left unmatched. Private to src/comm; needs
// MPI_THREAD_MULTIPLE.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "hpctrain/comm/bootstrap.h"

namespace hpctrain::comm {

class RankWatch {
 public:
  // Collective over `world` (duplicated for the heartbeats). Starts the thread.
  RankWatch(MPI_Comm world, const Topology& topology, double timeout_s);
  // On a normal end: says goodbye to the next rank and stops the thread. While an exception
  // unwinds (the job is about to be aborted) the thread goes on beating until the abort.
  ~RankWatch();
  RankWatch(const RankWatch&) = delete;
  RankWatch& operator=(const RankWatch&) = delete;

  // For a collective's timeout message, the rank that had issued the fewest collectives at the
  // last exchange of reports (Note [Report exchange] in rank_watch.cpp; lagging_rank_text in
  // rank_report.h); "" without a watch. Thread-safe.
  static std::string lagging_rank_report();

  struct State;

 private:
  std::shared_ptr<State> state_;  // shared with the thread, which may outlive this object
};

}  // namespace hpctrain::comm
