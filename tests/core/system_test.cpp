#include "hpctrain/core/system.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <fstream>

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
  fs::remove_all(dir);
}

TEST(System, HostNameIsKnown) { EXPECT_FALSE(host_name().empty()); }

}  // namespace
}  // namespace hpctrain::sys
