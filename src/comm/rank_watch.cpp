#include "rank_watch.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

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

// What keeps a rank in an activity with a limit (activity::set_limit) past it.
const char* why_stuck(activity::Kind kind) {
  switch (kind) {
    case activity::Kind::kLoader:
      return "a read is stuck (the file system?) or a loader thread died";
    case activity::Kind::kCheckpoint:
      return "the write is stuck (the file system?); if it is only slow, raise ckpt.write_timeout_s";
    default:
      return "it is stuck";
  }
}

double seconds_since(Clock::time_point then) { return std::chrono::duration<double>(Clock::now() - then).count(); }

// Every rank's report as of the last completed exchange, for lagging_rank_report().
struct Exchanged {
  std::mutex mutex;
  std::vector<Beat> reports;  // by world rank; empty until the first exchange completes
  std::vector<std::string> hosts;
  int self = -1;
  Clock::time_point when;
};
Exchanged g_exchanged;

// Note [Report exchange]: a collective that times out knows only that some rank is missing. To
// say which, every watch thread takes part in a running MPI_Iallgather of its rank's report on
// the watch's communicator: one round at a time, the next started once the last completes
// (progressed by the watch's MPI_Test every period; log W steps), so every rank holds every
// rank's report from at most a few periods ago, and a timeout names the rank that had issued the
// fewest collectives. The watch threads of stuck ranks still take part; a dead or frozen one
// stops the rounds, and the heartbeats name it. Rounds are collectives, so none may be left
// half-joined at the end: a leaving rank marks its reports `leaving` and goes on joining rounds
// until one in which every rank was leaving, the same round everywhere.
class ReportExchange {
 public:
  explicit ReportExchange(int world_size) : all_(static_cast<size_t>(world_size)) {}

  // Tests the round in flight (publishing it once complete), or starts the next one. True once a
  // completed round had every rank leaving: no rank starts another.
  bool progress(MPI_Comm comm, bool leaving) {
    if (request_ == MPI_REQUEST_NULL) {
      if (finished_) return true;
      mine_ = beat_now(leaving);
      MPI_Iallgather(&mine_, sizeof(Beat), MPI_BYTE, all_.data(), sizeof(Beat), MPI_BYTE, comm, &request_);
      return false;
    }
    int done = 0;
    MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
    if (!done) return false;
    finished_ = std::all_of(all_.begin(), all_.end(), [](const Beat& beat) { return beat.leaving != 0; });
    const std::lock_guard<std::mutex> lock(g_exchanged.mutex);
    g_exchanged.reports = all_;
    g_exchanged.when = Clock::now();
    return finished_;
  }

  bool in_flight() const { return request_ != MPI_REQUEST_NULL; }

 private:
  Beat mine_;
  std::vector<Beat> all_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool finished_ = false;
};

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
  void leave(MPI_Request& send, MPI_Request& receive, bool previous_left, std::unique_ptr<ReportExchange> exchange);
};

std::string RankWatch::lagging_rank_report() {
  const std::lock_guard<std::mutex> lock(g_exchanged.mutex);
  if (g_exchanged.reports.empty()) return "";
  const std::int64_t mine = activity::now().collectives;
  int lagging = -1;
  int behind = 0;
  for (int r = 0; r < static_cast<int>(g_exchanged.reports.size()); ++r) {
    const Beat& report = g_exchanged.reports[static_cast<size_t>(r)];
    if (r == g_exchanged.self || report.collectives >= mine) continue;
    ++behind;
    if (lagging < 0 || report.collectives < g_exchanged.reports[static_cast<size_t>(lagging)].collectives) lagging = r;
  }
  const double age = seconds_since(g_exchanged.when);
  if (lagging < 0) {
    return fmt::format("; at the last exchange of reports, {:.1f} s ago, no rank had issued fewer collectives than "
                       "this one ({}): a rank is stuck inside the collective, or the network is",
                       age, mine);
  }
  const Beat& report = g_exchanged.reports[static_cast<size_t>(lagging)];
  return fmt::format("; rank {} ({}) is furthest behind ({} of {} other ranks behind this one): at the last exchange "
                     "of reports, {:.1f} s ago, it was at {} (this rank: {})",
                     lagging, g_exchanged.hosts[static_cast<size_t>(lagging)], behind, g_exchanged.reports.size() - 1,
                     age, describe(report), mine);
}

RankWatch::RankWatch(MPI_Comm world, const Topology& topology, double timeout_s)
    : state_(std::make_shared<State>()) {
  HT_MPI_CHECK(MPI_Comm_dup(world, &state_->comm));
  state_->topology = topology;
  state_->timeout_s = timeout_s;
  {
    const std::lock_guard<std::mutex> lock(g_exchanged.mutex);
    g_exchanged.hosts = topology.hosts;
    g_exchanged.self = topology.world_rank;
  }
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
  std::optional<Beat> last_heard;
  bool previous_left = false;
  auto exchange = std::make_unique<ReportExchange>(size);

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
      last_heard = incoming;
      previous_left = incoming.leaving != 0;
      if (!previous_left) MPI_Irecv(&incoming, sizeof(Beat), MPI_BYTE, previous, kTag, comm, &receive);
    }
    if (!previous_left && seconds_since(heard) > limit_s) {
      const std::string last = last_heard ? "its last report: " + describe(*last_heard) : "it never reported";
      end_job(topology, fmt::format("rank {} ({}) has sent nothing for {:.1f} s (dist.timeout_s={}): it died, is "
                                    "stopped, or its node or the network failed; {} (this rank: {})",
                                    previous, topology.hosts[static_cast<size_t>(previous)], seconds_since(heard),
                                    timeout_s, last, describe(beat_now(false))));
    }
    exchange->progress(comm, /*leaving=*/false);
    const activity::Snapshot mine = activity::now();
    const activity::Limit bound = activity::limit(mine.kind);
    if (bound.seconds > 0 && mine.seconds_in > std::max(bound.seconds, 1.0)) {
      end_job(topology, fmt::format("this rank has been {} for {:.1f} s (step {}; {}={}): {}; the job ends",
                                    activity::describe(mine.kind), mine.seconds_in, mine.step, bound.option,
                                    bound.seconds, why_stuck(mine.kind)));
    }
    lock.lock();
    changed.wait_for(lock, period, [this] { return stop; });
  }
  lock.unlock();
  leave(send, receive, previous_left, std::move(exchange));
}

// Says goodbye to the next rank, and listens a moment longer for the previous rank's goodbye, and
// joins exchanges until every rank is leaving (Note [Report exchange]), so that MPI_Finalize
// finds no message unmatched (ranks end within moments of each other: the run ends with a
// barrier). Small messages complete at once; what does not within the wait goes to or comes from
// a rank that is gone, and is left to MPI.
void RankWatch::State::leave(MPI_Request& send, MPI_Request& receive, bool previous_left,
                             std::unique_ptr<ReportExchange> exchange) {
  const int size = topology.world_size;
  const int next = (topology.world_rank + 1) % size;
  const int previous = (topology.world_rank + size - 1) % size;
  goodbye = beat_now(true);
  MPI_Request farewell = MPI_REQUEST_NULL;
  MPI_Isend(&goodbye, sizeof(Beat), MPI_BYTE, next, kTag, comm, &farewell);
  const Clock::time_point start = Clock::now();
  bool exchanged = false;
  while (seconds_since(start) < std::max(timeout_s, 2.0)) {
    exchanged = exchange->progress(comm, /*leaving=*/true);
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
    if (send == MPI_REQUEST_NULL && farewell == MPI_REQUEST_NULL && previous_left && exchanged) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (send != MPI_REQUEST_NULL) MPI_Request_free(&send);
  if (farewell != MPI_REQUEST_NULL) MPI_Request_free(&farewell);
  if (receive != MPI_REQUEST_NULL) {
    MPI_Cancel(&receive);
    MPI_Wait(&receive, MPI_STATUS_IGNORE);
  }
  // A round some rank never joined cannot be cancelled; its buffers stay MPI's.
  if (exchange->in_flight()) static_cast<void>(exchange.release());
}

}  // namespace hpctrain::comm
