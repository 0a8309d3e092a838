#include "hpctrain/core/system.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "hpctrain/core/error.h"

namespace hpctrain::sys {
namespace {

namespace fs = std::filesystem;

TEST(System, AffinityCoresMatchesTheMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(affinity_cores(), CPU_COUNT(&set));
  EXPECT_GE(affinity_cores(), 1);
}

TEST(System, PublishAtomicallyReplacesAFileAndLeavesNoTemp) {
  const fs::path dir = fs::temp_directory_path() / ("hpctrain_sys_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "target") << "old";
  std::ofstream(dir / "temp") << "new";
  publish_atomically((dir / "temp").string(), (dir / "target").string());
  std::ifstream in(dir / "target");
  std::string text;
  in >> text;
  EXPECT_EQ(text, "new");
  EXPECT_FALSE(fs::exists(dir / "temp"));
  EXPECT_THROW(publish_atomically((dir / "missing").string(), (dir / "x").string()), Error);
  remove_tree(dir);
}

TEST(System, RemoveTreeRemovesEverythingBelowButNotWhatLinksPointAt) {
  const fs::path dir = fs::temp_directory_path() / ("hpctrain_tree_" + std::to_string(::getpid()));
  const fs::path outside = dir.string() + "_outside";
  fs::create_directories(dir / "a" / "b");
  fs::create_directories(outside);
  std::ofstream(dir / "a" / "b" / "file") << "x";
  std::ofstream(outside / "keep") << "y";
  fs::create_directory_symlink(outside, dir / "a" / "link");
  remove_tree(dir);
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(fs::exists(outside / "keep"));  // the link went, not its target's content
  remove_tree(dir);                           // already gone: nothing to do
  remove_tree(outside);
  EXPECT_FALSE(fs::exists(outside));
}

TEST(System, HostNameIsKnown) { EXPECT_FALSE(host_name().empty()); }

// At most the host's memory, and at least what this process holds now.
TEST(System, TheMemoryLimitIsAtMostTheHostsAndAboveThisProcesssUse) {
  const std::int64_t host = static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  EXPECT_LE(memory_limit_bytes(), host);
  EXPECT_GT(memory_limit_bytes(), peak_rss_bytes());
}

// Some, in bytes (not KiB), never more than the limit. (Other tests running alongside move it, so
// no test here takes memory and watches it fall.)
TEST(System, AvailableMemoryIsSomeButNotMoreThanTheLimit) {
  const std::int64_t available = available_memory_bytes();
  EXPECT_GT(available, std::int64_t{64} << 20);
  EXPECT_LE(available, memory_limit_bytes());
}

TEST(System, ProcessAgeIsTheTimeSinceThisProcessStarted) {
  const double first = process_age_s();
  EXPECT_GE(first, 0.0);
  EXPECT_LT(first, 3600.0);  // a test process, not the machine's uptime
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_GE(process_age_s() - first, 0.15);
}

TEST(System, AffinityCpusAreTheMasksCount) {
  const std::vector<int> cpus = affinity_cpus();
  EXPECT_EQ(static_cast<int>(cpus.size()), affinity_cores());
  EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
}

// Note [Threads per rank]: bound ranks keep their cores; ranks that may run on the same cores
// share them; train.threads overrides.
TEST(System, ThreadsPerRankShareTheCoresOfRanksThatOverlap) {
  EXPECT_EQ(threads_per_rank({{0}, {1}}, 0), (std::vector<int>{1, 1}));  // mpirun's binding
  EXPECT_EQ(threads_per_rank({{0, 1}, {0, 1}}, 0), (std::vector<int>{1, 1}));  // --bind-to none, 2 cores
  const std::vector<int> sixteen{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  EXPECT_EQ(threads_per_rank({sixteen, sixteen, sixteen, sixteen}, 0), (std::vector<int>{4, 4, 4, 4}));
  EXPECT_EQ(threads_per_rank({{0, 1}, {0, 1}, {0, 1}, {0, 1}}, 0), (std::vector<int>{1, 1, 1, 1}));  // at least 1
  // Two ranks sharing a socket's cores and one with a socket of its own.
  EXPECT_EQ(threads_per_rank({{0, 1, 2, 3}, {0, 1, 2, 3}, {4, 5, 6, 7}}, 0), (std::vector<int>{2, 2, 4}));
  EXPECT_EQ(threads_per_rank({{0, 1}, {0, 1}}, 3), (std::vector<int>{3, 3}));
}

}  // namespace
}  // namespace hpctrain::sys
