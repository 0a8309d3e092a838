#include "rank_watch.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>

#include "hpctrain/core/activity.h"
#include "hpctrain/core/error.h"
#include "mpi_check.h"

namespace hpctrain::comm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTag = 7301;

// One heartbeat: what the sender's training thread was doing when it was sent.
struct Beat {
  std::int64_t step = 0;
  std::int64_t collectives = 0;
  double seconds_in = 0;
  std::int32_t kind = 0;
  std::int32_t leaving = 0;  // 1: the sender ends normally; stop listening
};

Beat beat_now(bool leaving) {
  const activity::Snapshot now = activity::now();
  return {now.step, now.collectives, now.seconds_in, static_cast<std::int32_t>(now.kind), leaving ? 1 : 0};
}

// Buffers of beats in flight: a send to a rank that died, or a receive left posted when the job
// is aborted, may outlive the watch, so they live as long as the process. One watch per process.
Beat g_outgoing;
Beat g_goodbye;
Beat g_incoming;

// The previous rank's last beat, for previous_rank_report().
struct Heard {
  std::mutex mutex;
  int rank = -1;  // -1: nothing heard yet
  Beat beat;
  Clock::time_point when;
};
Heard g_heard;

std::string describe(const Beat& beat) {
  char text[200];
  std::snprintf(text, sizeof text, "step %lld, %s for %.1f s, %lld collectives issued",
                static_cast<long long>(beat.step), activity::describe(static_cast<activity::Kind>(beat.kind)),
                beat.seconds_in, static_cast<long long>(beat.collectives));
  return text;
}

[[noreturn]] void end_job(const Topology& topology, const std::string& message) {
  std::fprintf(stderr, "hpctrain: error: [rank %d/%d %s] %s\n", topology.world_rank, topology.world_size,
               topology.hosts[static_cast<size_t>(topology.world_rank)].c_str(), message.c_str());
  std::fflush(stderr);
  Bootstrap::abort_job(static_cast<int>(ExitCode::kComm));
}

}  // namespace

std::string RankWatch::previous_rank_report() {
  const std::lock_guard<std::mutex> lock(g_heard.mutex);
  if (g_heard.rank < 0) return "";
  char text[80];
  std::snprintf(text, sizeof text, "; rank %d's last report, %.1f s ago: ", g_heard.rank,
                std::chrono::duration<double>(Clock::now() - g_heard.when).count());
  return text + describe(g_heard.beat);
}

RankWatch::RankWatch(MPI_Comm world, const Topology& topology, double timeout_s)
    : topology_(topology), timeout_s_(timeout_s) {
  HT_MPI_CHECK(MPI_Comm_dup(world, &comm_));
  thread_ = std::thread([this] { watch(); });
}

RankWatch::~RankWatch() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    say_goodbye_ = std::uncaught_exceptions() == 0;
  }
  changed_.notify_all();
  thread_.join();
  if (say_goodbye_) MPI_Comm_free(&comm_);
}

void RankWatch::watch() {
  const int size = topology_.world_size;
  const int next = (topology_.world_rank + 1) % size;
  const int previous = (topology_.world_rank + size - 1) % size;
  // Several beats per timeout, so one late beat is never mistaken for silence.
  const auto period = std::chrono::duration<double>(std::clamp(timeout_s_ / 10, 0.02, 2.0));
  const auto limit = std::chrono::duration<double>(timeout_s_);

  Beat& incoming = g_incoming;
  Beat last_heard = beat_now(false);  // before the first beat: "starting"
  MPI_Request receive = MPI_REQUEST_NULL;
  MPI_Request send = MPI_REQUEST_NULL;
  MPI_Irecv(&incoming, sizeof(Beat), MPI_BYTE, previous, kTag, comm_, &receive);
  Clock::time_point heard = Clock::now();
  bool previous_left = false;

  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    int sent = 1;
    if (send != MPI_REQUEST_NULL) MPI_Test(&send, &sent, MPI_STATUS_IGNORE);
    // A beat still in flight means the next rank is not receiving; its own watcher will say so.
    if (sent) {
      g_outgoing = beat_now(false);
      MPI_Isend(&g_outgoing, sizeof(Beat), MPI_BYTE, next, kTag, comm_, &send);
    }
    while (!previous_left && receive != MPI_REQUEST_NULL) {
      int got = 0;
      MPI_Test(&receive, &got, MPI_STATUS_IGNORE);
      if (!got) break;
      heard = Clock::now();
      last_heard = incoming;
      {
        const std::lock_guard<std::mutex> lock_heard(g_heard.mutex);
        g_heard.rank = previous;
        g_heard.beat = incoming;
        g_heard.when = heard;
      }
      previous_left = incoming.leaving != 0;
      if (!previous_left) MPI_Irecv(&incoming, sizeof(Beat), MPI_BYTE, previous, kTag, comm_, &receive);
    }
    const auto silent = Clock::now() - heard;
    if (!previous_left && silent > limit) {
      char text[160];
      std::snprintf(text, sizeof text, "rank %d (%s) has sent nothing for %.1f s (dist.timeout_s=%g): ", previous,
                    topology_.hosts[static_cast<size_t>(previous)].c_str(),
                    std::chrono::duration<double>(silent).count(), timeout_s_);
      end_job(topology_, text + std::string("it died, is stopped, or its node or the network failed; its last "
                                            "report: ") +
                             describe(last_heard) + " (this rank: " + describe(beat_now(false)) + ")");
    }
    const activity::Snapshot mine = activity::now();
    if (activity::is_bounded(mine.kind) && mine.seconds_in > timeout_s_) {
      char text[240];
      std::snprintf(text, sizeof text,
                    "this rank has been %s for %.1f s (step %lld; dist.timeout_s=%g): a read is stuck (the "
                    "file system?) or a loader thread died; the job ends",
                    activity::describe(mine.kind), mine.seconds_in, static_cast<long long>(mine.step), timeout_s_);
      end_job(topology_, text);
    }
    lock.lock();
    changed_.wait_for(lock, period, [this] { return stop_; });
  }
  lock.unlock();
  if (!say_goodbye_) return;  // the job is being aborted: no more MPI calls from here
  g_goodbye = beat_now(true);
  MPI_Request goodbye = MPI_REQUEST_NULL;
  MPI_Isend(&g_goodbye, sizeof(Beat), MPI_BYTE, next, kTag, comm_, &goodbye);
  // Small messages complete at once; one that does not within a beat or two goes to a rank that
  // is gone, and is left to MPI.
  for (int tries = 0; tries < 100 && (send != MPI_REQUEST_NULL || goodbye != MPI_REQUEST_NULL); ++tries) {
    int done = 0;  // MPI_Test sets a completed request to MPI_REQUEST_NULL
    if (send != MPI_REQUEST_NULL) MPI_Test(&send, &done, MPI_STATUS_IGNORE);
    if (goodbye != MPI_REQUEST_NULL) MPI_Test(&goodbye, &done, MPI_STATUS_IGNORE);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (send != MPI_REQUEST_NULL) MPI_Request_free(&send);
  if (goodbye != MPI_REQUEST_NULL) MPI_Request_free(&goodbye);
  if (receive != MPI_REQUEST_NULL) {
    MPI_Cancel(&receive);
    MPI_Wait(&receive, MPI_STATUS_IGNORE);
  }
}

}  // namespace hpctrain::comm
