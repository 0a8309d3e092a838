// One job per run directory: <run.dir>/lock, made with O_EXCL and kept alive by a heartbeat for
// the job's life (Note [Run directory lock] in the .cpp). A second job is refused in one line
// naming the holder before it writes anything; a dead job's lock is taken over. Rank 0's.
// Depends on core only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace hpctrain::runtime {

// Who holds a lock, as its file says.
struct LockHolder {
  std::string host;
  std::int64_t pid = 0;
  std::string slurm_job;  // "" outside Slurm
  std::string started;    // UTC, ISO 8601
  std::string token;      // this holder's, unique
};

struct RunLockOptions {
  double beat_s = 2;    // between heartbeats
  double stale_s = 30;  // run.lock_stale_s: no heartbeat this long and the holder is taken as dead
  std::string host;     // this process's; filled from the system when empty
  std::int64_t pid = 0;
  std::string slurm_job;  // SLURM_JOB_ID by default: a requeue or relaunch of the same job takes over
  // Called on the heartbeat's thread if the lock is found taken by someone else (a holder judged
  // dead that was not): the job must end.
  std::function<void(const std::string& what)> on_lost;
};

RunLockOptions default_lock_options(double stale_s);

class RunLock {
 public:
  // Takes <dir>/lock (creating `dir`), waiting at most one heartbeat to see a live holder and up to
  // options.stale_s for a silent one. Throws Error (ExitCode::kUsage) naming the holder when the
  // directory is another live job's.
  static std::unique_ptr<RunLock> acquire(const std::string& dir, RunLockOptions options);
  // Stops the heartbeat and removes the lock file.
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const;
  // Removes the lock file of the lock this process holds, if any: for a job ending on an error,
  // whose destructors do not run (cli::exit_with_error).
  static void release_held();

  struct State;

 private:
  explicit RunLock(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace hpctrain::runtime
