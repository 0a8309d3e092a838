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

#include "hpctrain/comm/flight_recorder.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/error.h"
#include "mpi_check.h"
#include "rank_report.h"

namespace hpctrain::comm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTag = 7301;

// What keeps a rank in an activity with a limit (activity::set_limit) past it.
const char* why_stuck(activity::Kind kind) {
  switch (kind) {
    case activity::Kind::kLoader:
      return "a read is stuck (the file system?) or a loader thread died";
    case activity::Kind::kCheckpoint:
      return "the write is stuck (the file system?); if it is only slow, raise ckpt.write_timeout_s";
    case activity::Kind::kInCollective:
      return "a rank is missing from the collective (crashed, or stuck before it)";
    default:
      return "it is stuck";
  }
}

double seconds_since(Clock::time_point then) { return std::chrono::duration<double>(Clock::now() - then).count(); }

// Every rank's reports as of the last completed exchange, for lagging_rank_report().
struct Exchanged {
  std::mutex mutex;
  ExchangedReports last;  // reports empty until the first exchange completes
  Clock::time_point taken;  // when this rank contributed its report to it
  double stall_s = 0;       // an exchange older than this has stalled
};
Exchanged g_exchanged;

// Note [Report exchange]: a collective that times out knows only that some rank is missing. To
// say which, every watch thread takes part in a running MPI_Iallgather of its rank's report on
// the watch's communicator: one round at a time, each rank joining the next at its next beat once
// the last completed here (the rounds progress with the MPI calls of either thread; a round costs
// each rank O(log W) to O(W) messages of 32 bytes per rank, by the MPI's algorithm), so every rank
// holds every rank's report from about a beat ago, and a timeout names the rank that had issued
// the fewest collectives. The watch threads of stuck ranks still take part; a dead or frozen one
// stops the rounds (the report then says so, and the heartbeats name that rank). Rounds are
// collectives, so none may be left half-joined at the end: a leaving rank marks its reports
// `leaving` and goes on joining rounds until one in which every rank was leaving, the same round
// everywhere.
class ReportExchange {
 public:
  explicit ReportExchange(int world_size) : all_(static_cast<size_t>(world_size)) {}

  // Tests the round in flight (publishing it once complete), or starts the next one. True once a
  // completed round had every rank leaving: no rank starts another.
  bool progress(MPI_Comm comm, bool leaving) {
    if (request_ == MPI_REQUEST_NULL) {
      if (finished_) return true;
      mine_ = report_now(leaving);
      taken_ = Clock::now();
      MPI_Iallgather(&mine_, sizeof(RankReport), MPI_BYTE, all_.data(), sizeof(RankReport), MPI_BYTE, comm,
                     &request_);
      return false;
    }
    int done = 0;
    MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
    if (!done) return false;
    finished_ = std::all_of(all_.begin(), all_.end(), [](const RankReport& report) { return report.leaving != 0; });
    const std::lock_guard<std::mutex> lock(g_exchanged.mutex);
    g_exchanged.last.reports = all_;
    g_exchanged.taken = taken_;
    return finished_;
  }

  bool in_flight() const { return request_ != MPI_REQUEST_NULL; }

 private:
  RankReport mine_;
  Clock::time_point taken_;
  std::vector<RankReport> all_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool finished_ = false;
};

// Note [Flight recorder]: the message also says where the ranks' collectives parted.
[[noreturn]] void end_job(const Topology& topology, const std::string& what) {
  const std::string flight = flight::dump_everywhere_and_analyse(what, topology.world_size);
  const std::string message = flight.empty() ? what : what + "; " + flight;
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
  RankReport outgoing;
  RankReport goodbye;
  RankReport incoming;
  bool comm_in_use = false;  // by an exchange round left unfinished at the end

  void watch();
  void leave(MPI_Request& send, MPI_Request& receive, bool previous_left, std::unique_ptr<ReportExchange> exchange);
};

std::string RankWatch::lagging_rank_report() {
  ExchangedReports exchanged;
  {
    const std::lock_guard<std::mutex> lock(g_exchanged.mutex);
    exchanged = g_exchanged.last;
    exchanged.age_s = seconds_since(g_exchanged.taken);
    exchanged.stalled = exchanged.age_s > g_exchanged.stall_s;
  }
  return lagging_rank_text(exchanged, activity::now().collectives);
}

RankWatch::RankWatch(MPI_Comm world, const Topology& topology, double timeout_s)
    : state_(std::make_shared<State>()) {
  HT_MPI_CHECK(MPI_Comm_dup(world, &state_->comm));
  state_->topology = topology;
  state_->timeout_s = timeout_s;
  {
    const std::lock_guard<std::mutex> lock(g_exchanged.mutex);
    g_exchanged.last = {};
    g_exchanged.last.hosts = topology.hosts;
    g_exchanged.last.self = topology.world_rank;
    g_exchanged.stall_s = 3 * beat_period_s(timeout_s);
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
  if (!state_->comm_in_use) MPI_Comm_free(&state_->comm);
  const std::lock_guard<std::mutex> lock(g_exchanged.mutex);
  g_exchanged.last.reports.clear();
}

void RankWatch::State::watch() {
  const int size = topology.world_size;
  const int next = (topology.world_rank + 1) % size;
  const int previous = (topology.world_rank + size - 1) % size;
  const double limit_s = silence_limit_s(timeout_s);
  const auto period = std::chrono::duration<double>(beat_period_s(timeout_s));

  MPI_Request receive = MPI_REQUEST_NULL;
  MPI_Request send = MPI_REQUEST_NULL;
  MPI_Irecv(&incoming, sizeof(RankReport), MPI_BYTE, previous, kTag, comm, &receive);
  Clock::time_point heard = Clock::now();
  std::optional<RankReport> last_heard;
  bool previous_left = false;
  auto exchange = std::make_unique<ReportExchange>(size);

  std::unique_lock<std::mutex> lock(mutex);
  while (!stop) {
    lock.unlock();
    int sent = 1;
    if (send != MPI_REQUEST_NULL) MPI_Test(&send, &sent, MPI_STATUS_IGNORE);
    // A beat still in flight means the next rank is not receiving; its own next rank will say so.
    if (sent) {
      outgoing = report_now(false);
      MPI_Isend(&outgoing, sizeof(RankReport), MPI_BYTE, next, kTag, comm, &send);
    }
    while (!previous_left && receive != MPI_REQUEST_NULL) {
      int got = 0;
      MPI_Test(&receive, &got, MPI_STATUS_IGNORE);
      if (!got) break;
      heard = Clock::now();
      last_heard = incoming;
      previous_left = incoming.leaving != 0;
      if (!previous_left) MPI_Irecv(&incoming, sizeof(RankReport), MPI_BYTE, previous, kTag, comm, &receive);
    }
    if (!previous_left && seconds_since(heard) > limit_s) {
      const std::string last = last_heard ? "its last report: " + describe(*last_heard) : "it never reported";
      end_job(topology, fmt::format("rank {} ({}) has sent nothing for {:.1f} s (dist.timeout_s={}): it died, is "
                                    "stopped, or its node or the network failed; {} (this rank: {})",
                                    previous, topology.hosts[static_cast<size_t>(previous)], seconds_since(heard),
                                    timeout_s, last, describe(report_now(false))));
    }
    exchange->progress(comm, /*leaving=*/false);
    flight::dump_if_asked();
    const activity::Snapshot mine = activity::now();
    const activity::Limit bound = activity::limit(mine.kind);
    if (bound.seconds > 0 && mine.seconds_in > std::max(bound.seconds, 1.0)) {
      const std::string behind = mine.kind == activity::Kind::kInCollective ? lagging_rank_report() : "";
      end_job(topology, fmt::format("this rank has been {} for {:.1f} s (step {}; {}={}): {}{}; the job ends",
                                    activity::describe(mine.kind), mine.seconds_in, mine.step, bound.option,
                                    bound.seconds, why_stuck(mine.kind), behind));
    }
    lock.lock();
    changed.wait_for(lock, period, [this] { return stop; });
  }
  lock.unlock();
  leave(send, receive, previous_left, std::move(exchange));
}

// Says goodbye to the next rank and listens a moment longer for the previous rank's goodbye, and
// joins exchanges until every rank is leaving (Note [Report exchange]), so that MPI_Finalize
// finds no message unmatched. Ranks end within moments of each other (the run ends with a
// barrier): small messages complete at once, and what does not within 2 s goes to or comes from
// a rank that is gone, and is left to MPI. The exchange waits for every rank to arrive here, as
// MPI_Finalize would, but not past the silence limit.
void RankWatch::State::leave(MPI_Request& send, MPI_Request& receive, bool previous_left,
                             std::unique_ptr<ReportExchange> exchange) {
  const int size = topology.world_size;
  const int next = (topology.world_rank + 1) % size;
  const int previous = (topology.world_rank + size - 1) % size;
  goodbye = report_now(true);
  MPI_Request farewell = MPI_REQUEST_NULL;
  MPI_Isend(&goodbye, sizeof(RankReport), MPI_BYTE, next, kTag, comm, &farewell);
  const Clock::time_point start = Clock::now();
  const double exchange_limit_s = std::max(silence_limit_s(timeout_s), 2.0);
  bool said_goodbye = false;
  bool exchanged = false;
  while (!(said_goodbye && exchanged) && seconds_since(start) < exchange_limit_s) {
    if (!exchanged) exchanged = exchange->progress(comm, /*leaving=*/true);
    int done = 0;  // MPI_Test sets a completed request to MPI_REQUEST_NULL
    if (send != MPI_REQUEST_NULL) MPI_Test(&send, &done, MPI_STATUS_IGNORE);
    if (farewell != MPI_REQUEST_NULL) MPI_Test(&farewell, &done, MPI_STATUS_IGNORE);
    while (!previous_left && receive != MPI_REQUEST_NULL) {
      int got = 0;
      MPI_Test(&receive, &got, MPI_STATUS_IGNORE);
      if (!got) break;
      previous_left = incoming.leaving != 0;
      if (!previous_left) MPI_Irecv(&incoming, sizeof(RankReport), MPI_BYTE, previous, kTag, comm, &receive);
    }
    said_goodbye = (send == MPI_REQUEST_NULL && farewell == MPI_REQUEST_NULL && previous_left) ||
                   seconds_since(start) > 2.0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (send != MPI_REQUEST_NULL) MPI_Request_free(&send);
  if (farewell != MPI_REQUEST_NULL) MPI_Request_free(&farewell);
  if (receive != MPI_REQUEST_NULL) {
    MPI_Cancel(&receive);
    MPI_Wait(&receive, MPI_STATUS_IGNORE);
  }
  if (exchange->in_flight()) {
    // A round some rank never joined cannot be cancelled: its buffers and the communicator stay
    // MPI's.
    static_cast<void>(exchange.release());
    comm_in_use = true;
  }
}

}  // namespace hpctrain::comm
