#include "hpctrain/runtime/run_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"

namespace hpctrain::runtime {

// Note [Run directory lock]: two jobs on one run.dir (a job submitted twice, a requeue racing a
// manual resubmit) would both run to the end, interleaving metrics.jsonl and checkpoints. flock()
// does not hold across the nodes of many cluster file systems, so the lock is a lease file:
// - made with open(O_CREAT | O_EXCL), atomic on local file systems, NFSv3+, Lustre and GPFS;
// - holding the holder's host, process, Slurm job, start time, a unique token and a heartbeat
//   count that the holder's thread rewrites in place every beat_s (same length, so a reader sees
//   the old bytes or the new). A reader judges liveness by the count changing between two of its
//   own reads (close-to-open consistency makes each open see the server's bytes); no clock of two
//   hosts is compared;
// - taken over at once when it is this Slurm job's own (a requeue or a relaunch after a failure:
//   Slurm ends a job's steps before it starts them again) or its holder's process on this host
//   has ended; otherwise after stale_s without a heartbeat. A live holder is seen within one beat,
//   and the newcomer is refused, naming it.
// A take-over renames the file aside and checks that what it moved is the lock it judged dead: if
// it is not (another job took it meanwhile), it is linked back, which fails if yet another was made.
// The holder checks its token at every beat; a lock taken from a job judged dead wrongly (frozen
// past stale_s) ends that job (on_lost), so two jobs never run on for long.
struct RunLock::State {
  std::string path;
  RunLockOptions options;
  LockHolder self;
  std::int64_t beat = 0;
  std::mutex mutex;
  std::condition_variable changed;
  bool stop = false;
  std::thread heartbeat;
};

namespace {

constexpr int kBeatDigits = 12;

std::mutex held_mutex;
std::string held_path;   // the lock file this process holds; "" when none
std::string held_token;  // and its token: a lock taken from this job is not removed by it

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string new_token(const LockHolder& holder) {
  std::random_device device;
  const auto nanoseconds = std::chrono::steady_clock::now().time_since_epoch().count();
  return holder.host + "-" + std::to_string(holder.pid) + "-" + std::to_string(nanoseconds) + "-" +
         std::to_string(device());
}

// The file's bytes: the holder and the heartbeat count, always of one length.
std::string lock_text(const LockHolder& holder, std::int64_t beat) {
  nlohmann::json record{{"host", holder.host},       {"pid", holder.pid},         {"slurm_job", holder.slurm_job},
                        {"started", holder.started}, {"token", holder.token}};
  char count[32];  // kBeatDigits of them: the count wraps at 10^12 beats
  std::snprintf(count, sizeof(count), "%0*lld", kBeatDigits, static_cast<long long>(beat % 1000000000000LL));
  std::string text = record.dump();
  text.back() = ',';
  return text + "\"beat\":\"" + count + "\"}\n";
}

// The file's bytes, or nullopt when it is not there.
std::optional<std::string> read_lock(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::optional<LockHolder> parse_holder(const std::string& text) {
  const nlohmann::json record = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) return std::nullopt;
  LockHolder holder;
  const auto text_of = [&](const char* key) {
    const auto found = record.find(key);
    return found != record.end() && found->is_string() ? found->get<std::string>() : std::string();
  };
  holder.host = text_of("host");
  holder.slurm_job = text_of("slurm_job");
  holder.started = text_of("started");
  holder.token = text_of("token");
  const auto pid = record.find("pid");
  if (pid != record.end() && pid->is_number_integer()) holder.pid = pid->get<std::int64_t>();
  return holder;
}

std::string describe(const std::optional<LockHolder>& holder) {
  if (!holder) return "a holder its lock file does not name (unreadable)";
  std::string out = "host " + holder->host + ", process " + std::to_string(holder->pid);
  if (!holder->slurm_job.empty()) out += ", Slurm job " + holder->slurm_job;
  return out + ", started " + holder->started;
}

bool process_ended(std::int64_t pid) { return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

// Why the lock in `text` may be taken at once, or "" when its heartbeat must be watched.
std::string taken_at_once(const std::optional<LockHolder>& holder, const RunLockOptions& options) {
  if (!holder) return "";
  if (!options.slurm_job.empty() && holder->slurm_job == options.slurm_job) {
    return "it is this Slurm job's own (a requeue or a relaunch)";
  }
  if (holder->host == options.host && process_ended(holder->pid)) return "its process has ended";
  return "";
}

// True when the lock still holds `text` after stale_s: no heartbeat, a dead holder. False as soon
// as it changes or goes.
bool silent_for_stale_time(const std::string& path, const std::string& text, double stale_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(stale_s);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (read_lock(path) != text) return false;
  }
  return true;
}

// Moves the dead lock `text` out of the way; false when what was at `path` was another one.
bool take_over(const std::string& path, const std::string& text, const std::string& token) {
  const std::string aside = path + ".taken-" + token;
  if (std::rename(path.c_str(), aside.c_str()) != 0) return false;  // gone already
  const bool same = read_lock(aside) == text;
  if (!same) (void)::link(aside.c_str(), path.c_str());  // not ours to take: back, unless made anew
  std::remove(aside.c_str());
  return same;
}

// Makes the lock file; false when one exists.
bool create_lock(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return false;
    throw Error("run.dir: cannot create the lock file " + path + ": " + std::strerror(errno) +
                    " (check run.dir and its permissions)",
                ExitCode::kUsage);
  }
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written) throw Error("run.dir: cannot write the lock file " + path, ExitCode::kUsage);
  return true;
}

// One heartbeat: the count rewritten in place, after checking the file is still this job's,
// through one descriptor, so the file checked is the file written (a take-over renames it aside).
bool beat_once(RunLock::State& state) {
  const int fd = ::open(state.path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  std::string text(4096, '\0');
  const ssize_t got = ::pread(fd, text.data(), text.size(), 0);
  text.resize(got > 0 ? static_cast<size_t>(got) : 0);
  const std::optional<LockHolder> holder = parse_holder(text);
  bool written = false;
  if (holder && holder->token == state.self.token) {
    const std::string next = lock_text(state.self, ++state.beat);
    written = ::pwrite(fd, next.data(), next.size(), 0) == static_cast<ssize_t>(next.size());
  }
  ::close(fd);  // which sends the bytes to a network file system's server
  return written;
}

// Removes the lock at `path` if it still holds `token`.
void remove_if_ours(const std::string& path, const std::string& token) {
  const std::optional<std::string> text = read_lock(path);
  const std::optional<LockHolder> holder = text ? parse_holder(*text) : std::nullopt;
  if (holder && holder->token == token) std::remove(path.c_str());
}

void run_heartbeat(const std::shared_ptr<RunLock::State>& state) {
  std::unique_lock<std::mutex> lock(state->mutex);
  while (!state->changed.wait_for(lock, std::chrono::duration<double>(state->options.beat_s),
                                  [&] { return state->stop; })) {
    if (beat_once(*state)) continue;
    const std::optional<std::string> text = read_lock(state->path);
    const std::string what = "run.dir: the lock " + state->path + " of this job was taken by " +
                             describe(text ? parse_holder(*text) : std::nullopt) +
                             " (this job's heartbeat stopped for run.lock_stale_s?): two jobs must not share a "
                             "run directory";
    if (state->options.on_lost) state->options.on_lost(what);
    return;
  }
}

}  // namespace

RunLockOptions default_lock_options(double stale_s) {
  RunLockOptions options;
  options.stale_s = stale_s;
  const char* job = std::getenv("SLURM_JOB_ID");
  options.slurm_job = job != nullptr ? job : "";
  return options;
}

std::unique_ptr<RunLock> RunLock::acquire(const std::string& dir, RunLockOptions options) {
  if (options.host.empty()) options.host = sys::host_name();
  if (options.pid == 0) options.pid = ::getpid();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  auto state = std::make_shared<State>();
  state->path = (std::filesystem::path(dir) / "lock").string();
  state->self = {options.host, options.pid, options.slurm_job, utc_now(), ""};
  state->self.token = new_token(state->self);
  state->options = std::move(options);
  const RunLockOptions& o = state->options;
  for (int attempt = 0; attempt < 8; ++attempt) {
    if (create_lock(state->path, lock_text(state->self, 0))) return std::unique_ptr<RunLock>(new RunLock(state));
    const std::optional<std::string> text = read_lock(state->path);
    if (!text) continue;  // its holder just removed it
    const std::optional<LockHolder> holder = parse_holder(*text);
    std::string why = taken_at_once(holder, o);
    if (why.empty()) {
      if (!silent_for_stale_time(state->path, *text, o.stale_s)) {
        if (!read_lock(state->path)) continue;  // it ended meanwhile
        throw Error("run.dir=" + dir + " is in use by another job: " + describe(holder) + " (its lock " +
                        state->path + " has a live heartbeat); wait for that job to end, or give this one "
                        "another run.dir",
                    ExitCode::kUsage);
      }
      why = "no heartbeat for run.lock_stale_s=" + fmt::format("{:g}", o.stale_s) + " s";
    }
    if (take_over(state->path, *text, state->self.token)) {
      log::warn("run.dir: taking over the lock {} of {}: {}", state->path, describe(holder), why);
    }
  }
  throw Error("run.dir=" + dir + ": could not take its lock " + state->path +
                  " after 8 tries (other jobs keep starting on it); start one job per run directory",
              ExitCode::kUsage);
}

RunLock::RunLock(std::shared_ptr<State> state) : state_(std::move(state)) {
  {
    const std::lock_guard<std::mutex> lock(held_mutex);
    held_path = state_->path;
    held_token = state_->self.token;
  }
  state_->heartbeat = std::thread([state = state_] { run_heartbeat(state); });
}

RunLock::~RunLock() {
  {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->changed.notify_all();
  state_->heartbeat.join();
  const std::lock_guard<std::mutex> lock(held_mutex);
  remove_if_ours(state_->path, state_->self.token);
  if (held_token == state_->self.token) held_path.clear();
}

const std::string& RunLock::path() const { return state_->path; }

void RunLock::release_held() {
  const std::lock_guard<std::mutex> lock(held_mutex);
  if (held_path.empty()) return;
  remove_if_ours(held_path, held_token);
  held_path.clear();
}

}  // namespace hpctrain::runtime
