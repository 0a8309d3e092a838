// Facts about this process and host that every module may ask: host name, the cores this process
// may run on, its peak memory, and the allocator tuning libtorch needs on CPU. Depends on std only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::sys {

std::string host_name();

// Number of CPUs in this process's affinity mask (what mpirun/srun bound it to); at least 1.
int affinity_cores();
// The CPUs of that mask, ascending.
std::vector<int> affinity_cpus();

// Note [Threads per rank]: intra-op threads for each of one node's ranks, given the CPUs each may
// run on: `threads` when > 0 (train.threads), else a rank's CPUs divided among the ranks whose
// CPUs overlap its own, at least 1. Ranks bound to cores of their own keep them all; ranks left
// unbound (mpirun --bind-to none, srun --cpu-bind=none) share the node's cores instead of each
// taking every one of them.
std::vector<int> threads_per_rank(const std::vector<std::vector<int>>& cpus, int threads);

// The memory this process may use, in bytes: the host's physical memory, or less where its
// cgroup (a Slurm job's, say; v2 memory.max, v1 memory.limit_in_bytes) sets a lower limit. 0
// where the system does not say.
std::int64_t memory_limit_bytes();
// The memory still free for this process to take, in bytes: the host's MemAvailable, or less where
// its cgroup's limit is nearer (limit minus what the cgroup uses). 0 where the system does not say.
std::int64_t available_memory_bytes();

// The most resident memory this process has had, in bytes (getrusage's ru_maxrss).
std::int64_t peak_rss_bytes();
// The resident memory of this process now, in bytes (/proc/self/statm); 0 where unknown.
std::int64_t current_rss_bytes();

// Seconds since the kernel started this process (its start time in /proc, to 10 ms): start-up
// timing that includes loading the shared libraries, before any code of ours ran. -1 where /proc
// does not say.
double process_age_s();

// Keeps glibc from returning and re-requesting libtorch's large buffers on every step
// (see docs/architecture.md, "Allocator"). Idempotent.
void tune_allocator();

// While alive, allocations of 1 MiB or more are mapped, and go back to the kernel when freed: for
// a sharded run's model, whose parameters then stay out of the heap a step's temporaries use, and
// at ZeRO stage 3, where the model is built whole only to be cut into shards, would otherwise
// leave a hole of its size in the heap, which the temporaries scatter into and keep resident.
// Does nothing unless `active` and tune_allocator() set the thresholds (GLIBC_TUNABLES unset).
// Meanwhile the block cache (ddp/block_cache.h) leaves every request to malloc. One at a time.
class LargeAllocationsMapped {
 public:
  explicit LargeAllocationsMapped(bool active);
  ~LargeAllocationsMapped();
  LargeAllocationsMapped(const LargeAllocationsMapped&) = delete;
  LargeAllocationsMapped& operator=(const LargeAllocationsMapped&) = delete;

 private:
  bool active_;
};

// Whether a LargeAllocationsMapped is alive and active (the block cache asks).
bool large_allocations_mapped();

// Starts writing `path`'s dirty pages to disk and returns without waiting (Linux's
// sync_file_range), so that the fsync of publish_atomically later waits only for the rest: the
// disk works while the next part of a file is written. Best effort: does nothing where the file
// cannot be opened or the call is not supported.
void start_writeback(const std::string& path);

// Durably publishes `temp` as `target` (a file or a directory): fsync the file (or every file in the
// directory), rename over the target, fsync the parent directory. Readers see the old or the new
// content, never a half-written one. Throws hpctrain::Error with errno's text on failure.
void publish_atomically(const std::string& temp, const std::string& target);

// The whole of a small file a user hands in (a config, an index, a vocabulary), its size checked
// before anything is allocated, into `bytes`. Returns "" or what went wrong: "PATH: cannot read
// WHAT (reason)", "PATH: N bytes, more than LIMIT for WHAT".
std::string try_read_small_file(const std::string& path, std::int64_t max_bytes, const std::string& what,
                                std::string& bytes);

// The same, throwing E (ConfigError, DataError, ...) with what went wrong and `hint`.
template <class E>
std::string read_small_file(const std::string& path, std::int64_t max_bytes, const std::string& what,
                            const std::string& hint = "") {
  std::string bytes;
  const std::string error = try_read_small_file(path, max_bytes, what, bytes);
  if (!error.empty()) throw E(error + (hint.empty() ? "" : "; " + hint));
  return bytes;
}

// Removes `path` and everything below it, like `rm -rf`; nothing to do if it does not exist.
// Throws hpctrain::Error naming the entry that could not be removed. Use it instead of
// std::filesystem::remove_all: the libtorch of pip's torch wheels exports its own copy of that
// function, which the dynamic linker binds first and which crashes when called.
void remove_tree(const std::string& path);

}  // namespace hpctrain::sys
