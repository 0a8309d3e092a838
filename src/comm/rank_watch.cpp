#include "rank_watch.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>

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

std::string describe(const Beat& beat) {
  return fmt::format("step {}, {} for {:.1f} s, {} collectives issued", beat.step,
                     activity::describe(static_cast<activity::Kind>(beat.kind)), beat.seconds_in, beat.collectives);
}

double seconds_since(Clock::time_point then) { return std::chrono::duration<double>(Clock::now() - then).count(); }

// The previous rank's last beat, for previous_rank_report().
struct Heard {
  std::mutex mutex;
  int rank = -1;  // -1: nothing heard yet
  Beat beat;
  Clock::time_point when;
};
Heard g_heard;

[[noreturn]] void end_job(const Topology& topology, const std::string& message) {
  std::fprintf(stderr, "hpctrain: error: [rank %d/%d %s] %s\n", topology.world_rank, topology.world_size,
               topology.hosts[static_cast<size_t>(topology.world_rank)].c_str(), message.c_str());
  std::fflush(stderr);
  Bootstrap::abort_job(static_cast<int>(ExitCode::kComm));
}

}  // namespace

struct RankWatch::State {
  MPI_Comm comm = MPI_COMM_NULL;
  Topology topology;
  double timeout_s = 300;
  std::mutex mutex;
  std::condition_variable changed;
  bool stop = false;
  std::thread thread;
  // Buffers of beats in flight, here so they live as long as a request that uses them.
  Beat outgoing;
  Beat goodbye;
  Beat incoming;

  void watch();
  void leave(MPI_Request& send, MPI_Request& receive, bool previous_left);
};

std::string RankWatch::previous_rank_report() {
  const std::lock_guard<std::mutex> lock(g_heard.mutex);
  if (g_heard.rank < 0) return "";
  return fmt::format("; the previous rank, {}, last reported {:.1f} s ago: {}", g_heard.rank,
                     seconds_since(g_heard.when), describe(g_heard.beat));
}

RankWatch::RankWatch(MPI_Comm world, const Topology& topology, double timeout_s)
    : state_(std::make_shared<State>()) {
  HT_MPI_CHECK(MPI_Comm_dup(world, &state_->comm));
  state_->topology = topology;
  state_->timeout_s = timeout_s;
  state_->thread = std::thread([state = state_] { state->watch(); });
}

RankWatch::~RankWatch() {
  if (std::uncaught_exceptions() > 0) {
    state_->thread.detach();  // beats on, holding the state, until main() aborts the job
    return;
  }
  {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->changed.notify_all();
  state_->thread.join();
  MPI_Comm_free(&state_->comm);
}

void RankWatch::State::watch() {
  const int size = topology.world_size;
  const int next = (topology.world_rank + 1) % size;
  const int previous = (topology.world_rank + size - 1) % size;
  // Several beats per timeout, so one late beat is never mistaken for silence; below a second a
  // loaded machine's scheduling alone could look like silence.
  const double limit_s = std::max(timeout_s, 1.0);
  const auto period = std::chrono::duration<double>(std::clamp(limit_s / 10, 0.05, 2.0));

  MPI_Request receive = MPI_REQUEST_NULL;
  MPI_Request send = MPI_REQUEST_NULL;
  MPI_Irecv(&incoming, sizeof(Beat), MPI_BYTE, previous, kTag, comm, &receive);
  Clock::time_point heard = Clock::now();
  bool heard_any = false;
  bool previous_left = false;

  std::unique_lock<std::mutex> lock(mutex);
  while (!stop) {
    lock.unlock();
    int sent = 1;
    if (send != MPI_REQUEST_NULL) MPI_Test(&send, &sent, MPI_STATUS_IGNORE);
    // A beat still in flight means the next rank is not receiving; its own next rank will say so.
    if (sent) {
      outgoing = beat_now(false);
      MPI_Isend(&outgoing, sizeof(Beat), MPI_BYTE, next, kTag, comm, &send);
    }
    while (!previous_left && receive != MPI_REQUEST_NULL) {
      int got = 0;
      MPI_Test(&receive, &got, MPI_STATUS_IGNORE);
      if (!got) break;
      heard = Clock::now();
      heard_any = true;
      previous_left = incoming.leaving != 0;
      {
        const std::lock_guard<std::mutex> lock_heard(g_heard.mutex);
        g_heard.rank = previous;
        g_heard.beat = incoming;
        g_heard.when = heard;
      }
      if (!previous_left) MPI_Irecv(&incoming, sizeof(Beat), MPI_BYTE, previous, kTag, comm, &receive);
    }
    if (!previous_left && seconds_since(heard) > limit_s) {
      std::string last = "it never reported";
      {
        const std::lock_guard<std::mutex> lock_heard(g_heard.mutex);
        if (heard_any) last = "its last report: " + describe(g_heard.beat);
      }
      end_job(topology, fmt::format("rank {} ({}) has sent nothing for {:.1f} s (dist.timeout_s={}): it died, is "
                                    "stopped, or its node or the network failed; {} (this rank: {})",
                                    previous, topology.hosts[static_cast<size_t>(previous)], seconds_since(heard),
                                    timeout_s, last, describe(beat_now(false))));
    }
    const activity::Snapshot mine = activity::now();
    if (activity::is_bounded(mine.kind) && mine.seconds_in > limit_s) {
      end_job(topology, fmt::format("this rank has been {} for {:.1f} s (step {}; dist.timeout_s={}): a read is "
                                    "stuck (the file system?) or a loader thread died; the job ends",
                                    activity::describe(mine.kind), mine.seconds_in, mine.step, timeout_s));
    }
    lock.lock();
    changed.wait_for(lock, period, [this] { return stop; });
  }
  lock.unlock();
  leave(send, receive, previous_left);
}

// Says goodbye to the next rank, and listens a moment longer for the previous rank's goodbye, so
// that MPI_Finalize finds no message unmatched (ranks end within moments of each other: the run
// ends with a barrier). Small messages complete at once; what does not within the wait goes to or
// comes from a rank that is gone, and is left to MPI.
void RankWatch::State::leave(MPI_Request& send, MPI_Request& receive, bool previous_left) {
  const int size = topology.world_size;
  const int next = (topology.world_rank + 1) % size;
  const int previous = (topology.world_rank + size - 1) % size;
  goodbye = beat_now(true);
  MPI_Request farewell = MPI_REQUEST_NULL;
  MPI_Isend(&goodbye, sizeof(Beat), MPI_BYTE, next, kTag, comm, &farewell);
  const Clock::time_point start = Clock::now();
  while (seconds_since(start) < 2.0) {
    int done = 0;  // MPI_Test sets a completed request to MPI_REQUEST_NULL
    if (send != MPI_REQUEST_NULL) MPI_Test(&send, &done, MPI_STATUS_IGNORE);
    if (farewell != MPI_REQUEST_NULL) MPI_Test(&farewell, &done, MPI_STATUS_IGNORE);
    while (!previous_left && receive != MPI_REQUEST_NULL) {
      int got = 0;
      MPI_Test(&receive, &got, MPI_STATUS_IGNORE);
      if (!got) break;
      previous_left = incoming.leaving != 0;
      if (!previous_left) MPI_Irecv(&incoming, sizeof(Beat), MPI_BYTE, previous, kTag, comm, &receive);
    }
    if (send == MPI_REQUEST_NULL && farewell == MPI_REQUEST_NULL && previous_left) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (send != MPI_REQUEST_NULL) MPI_Request_free(&send);
  if (farewell != MPI_REQUEST_NULL) MPI_Request_free(&farewell);
  if (receive != MPI_REQUEST_NULL) {
    MPI_Cancel(&receive);
    MPI_Wait(&receive, MPI_STATUS_IGNORE);
  }
}

}  // namespace hpctrain::comm
