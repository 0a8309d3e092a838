#include "hpctrain/core/system.h"

#include <fcntl.h>
#include <ftw.h>
#include <malloc.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/core/error.h"

namespace hpctrain::sys {

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

std::vector<int> threads_per_rank(const std::vector<std::vector<int>>& cpus, int threads) {
  const auto overlap = [](const std::vector<int>& a, const std::vector<int>& b) {
    for (const int cpu : a) {
      if (std::binary_search(b.begin(), b.end(), cpu)) return true;
    }
    return false;
  };
  std::vector<int> out;
  for (const std::vector<int>& mine : cpus) {
    if (threads > 0) {
      out.push_back(threads);
      continue;
    }
    const auto sharing = std::count_if(cpus.begin(), cpus.end(),
                                       [&](const std::vector<int>& other) { return overlap(mine, other); });
    const int cores = static_cast<int>(mine.size());
    out.push_back(std::max(1, cores / static_cast<int>(std::max<std::ptrdiff_t>(1, sharing))));
  }
  return out;
}

namespace {

// The number in a cgroup file such as memory.max, or -1 ("max", absent, unreadable).
std::int64_t cgroup_number(const std::string& path) {
  std::ifstream in(path);
  std::int64_t value = -1;
  if (!(in >> value)) return -1;
  return value;
}

// The value of `key` in a cgroup's memory.stat ("inactive_file 123"); 0 where absent.
std::int64_t memory_stat(const std::string& dir, const std::string& key) {
  std::ifstream stat(dir + "/memory.stat");
  std::string name;
  std::int64_t value = 0;
  while (stat >> name >> value) {
    if (name == key) return value;
  }
  return 0;
}

// This process's memory cgroups, each as (limit, usage) in bytes, -1 where unknown. The usage
// leaves out the inactive page cache, which the kernel reclaims before it would refuse memory.
// /proc/self/cgroup: "0::/path" (v2), "N:memory:/path" or "N:...,memory,...:/path" (v1).
std::vector<std::pair<std::int64_t, std::int64_t>> memory_cgroups() {
  std::vector<std::pair<std::int64_t, std::int64_t>> groups;
  std::ifstream lines("/proc/self/cgroup");
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = "," + line.substr(first + 1, second - first - 1) + ",";
    const std::string path = line.substr(second + 1);
    if (controllers == ",,") {
      const std::string dir = "/sys/fs/cgroup" + path;
      const std::int64_t usage = cgroup_number(dir + "/memory.current");
      groups.emplace_back(cgroup_number(dir + "/memory.max"), usage - memory_stat(dir, "inactive_file"));
    } else if (controllers.find(",memory,") != std::string::npos) {
      const std::string dir = "/sys/fs/cgroup/memory" + path;
      const std::int64_t usage = cgroup_number(dir + "/memory.usage_in_bytes");
      groups.emplace_back(cgroup_number(dir + "/memory.limit_in_bytes"), usage - memory_stat(dir, "total_inactive_file"));
    }
  }
  return groups;
}

// A field of /proc/meminfo ("MemAvailable"), in bytes; -1 where absent.
std::int64_t meminfo_bytes(const std::string& field) {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.compare(0, field.size() + 1, field + ":") != 0) continue;
    std::istringstream value(line.substr(field.size() + 1));
    std::int64_t kib = -1;
    if (value >> kib) return kib * 1024;
  }
  return -1;
}

}  // namespace

std::int64_t memory_limit_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGESIZE);
  std::int64_t limit = pages > 0 && page_bytes > 0 ? static_cast<std::int64_t>(pages) * page_bytes : 0;
  for (const auto& [group_limit, usage] : memory_cgroups()) {
    if (group_limit > 0 && (limit == 0 || group_limit < limit)) limit = group_limit;
  }
  return limit;
}

std::int64_t available_memory_bytes() {
  std::int64_t available = meminfo_bytes("MemAvailable");
  for (const auto& [limit, usage] : memory_cgroups()) {
    if (limit <= 0 || usage < 0) continue;
    const std::int64_t left = std::max<std::int64_t>(0, limit - usage);
    if (available < 0 || left < available) available = left;
  }
  return std::max<std::int64_t>(0, available);
}

std::int64_t peak_rss_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::int64_t current_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages = 0;
  std::int64_t resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

double process_age_s() {
  // Field 22 of /proc/self/stat, after the command name in parentheses (which may hold spaces):
  // the start time in clock ticks since boot; /proc/uptime: seconds since boot.
  std::ifstream stat_file("/proc/self/stat");
  std::ifstream uptime_file("/proc/uptime");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  double uptime_s = 0;
  const auto name_end = stat.rfind(')');
  if (!(uptime_file >> uptime_s) || name_end == std::string::npos) return -1;
  std::istringstream fields(stat.substr(name_end + 2));  // from field 3, the state
  std::string skipped;
  for (int field = 3; field < 22; ++field) fields >> skipped;
  unsigned long long start_ticks = 0;
  const long ticks_per_s = sysconf(_SC_CLK_TCK);
  if (!(fields >> start_ticks) || ticks_per_s <= 0) return -1;
  return uptime_s - static_cast<double>(start_ticks) / static_cast<double>(ticks_per_s);
}

namespace {
constexpr int kThresholdBytes = 256 << 20;
std::atomic<bool> g_allocator_tuned{false};
std::atomic<bool> g_large_mapped{false};
}  // namespace

void tune_allocator() {
  // Note [Allocator thresholds]: with glibc's dynamic thresholds, libtorch's activation buffers
  // (hundreds of KiB to MiB) are mmapped and unmapped every step, costing ~18% of a CPU step in page
  // faults. Fixed 256 MiB thresholds keep them in the heap. GLIBC_TUNABLES set by the user wins.
  if (std::getenv("GLIBC_TUNABLES") != nullptr) return;
  mallopt(M_MMAP_THRESHOLD, kThresholdBytes);
  mallopt(M_TRIM_THRESHOLD, kThresholdBytes);
  g_allocator_tuned = true;
}

LargeAllocationsMapped::LargeAllocationsMapped(bool active) : active_(active && g_allocator_tuned) {
  if (!active_) return;
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  g_large_mapped = true;
}

LargeAllocationsMapped::~LargeAllocationsMapped() {
  if (!active_) return;
  mallopt(M_MMAP_THRESHOLD, kThresholdBytes);
  g_large_mapped = false;
}

bool large_allocations_mapped() { return g_large_mapped; }

namespace {

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open " + path + " to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL); the rename is still atomic there.
  if (rc != 0 && saved != EINVAL) {
    throw Error("fsync of " + path + " failed: " + std::strerror(saved));
  }
}

}  // namespace

void start_writeback(const std::string& path) {
#ifdef SYNC_FILE_RANGE_WRITE
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  ::close(fd);
#else
  (void)path;
#endif
}

void publish_atomically(const std::string& temp, const std::string& target) {
  namespace fs = std::filesystem;
  if (fs::is_directory(temp)) {
    for (const auto& entry : fs::recursive_directory_iterator(temp)) {
      if (entry.is_regular_file()) fsync_path(entry.path().string());
    }
  }
  fsync_path(temp);
  if (std::rename(temp.c_str(), target.c_str()) != 0) {
    throw Error("cannot rename " + temp + " to " + target + ": " + std::strerror(errno));
  }
  const fs::path parent = fs::path(target).parent_path();
  fsync_path(parent.empty() ? "." : parent.string());
}

namespace {

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return std::remove(path) == 0 ? 0 : errno;
}

}  // namespace

std::string try_read_small_file(const std::string& path, std::int64_t max_bytes, const std::string& what,
                                std::string& bytes) {
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error) return path + ": cannot read " + what + " (" + error.message() + ")";
  if (size > static_cast<std::uintmax_t>(max_bytes)) {
    return path + ": " + std::to_string(size) + " bytes, more than " + std::to_string(max_bytes) + " for " + what;
  }
  std::ifstream in(path, std::ios::binary);
  bytes.assign(static_cast<size_t>(size), '\0');
  if (!in.read(bytes.data(), static_cast<std::streamsize>(size))) return path + ": cannot read " + what;
  return "";
}

void remove_tree(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0 && errno == ENOENT) return;
  // Depth first, links not followed: children go before their directory, nothing outside `path`.
  const int rc = ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (rc != 0) {
    throw Error("cannot remove " + path + ": " + std::strerror(rc > 0 ? rc : errno));
  }
}

}  // namespace hpctrain::sys
