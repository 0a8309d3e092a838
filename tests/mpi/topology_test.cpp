// Runs under mpirun -np 2 and -np 3 on one node.
#include <gtest/gtest.h>

#include <cstdlib>

#include "hpctrain/core/system.h"
#include "mpi_fixture.h"

namespace hpctrain::comm {
namespace {

TEST(Topology, WorldAndNodeLocalRanksAgreeWithTheLauncher) {
  const Topology& t = testing::g_bootstrap->topology();
  if (const char* size = std::getenv("OMPI_COMM_WORLD_SIZE")) {
    EXPECT_EQ(t.world_size, std::atoi(size));
  }
  if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK")) {
    EXPECT_EQ(t.world_rank, std::atoi(rank));
  }
  // All ranks of these tests share one machine: one node, local = world.
  EXPECT_EQ(t.node_count, 1);
  EXPECT_EQ(t.node_rank, 0);
  EXPECT_EQ(t.local_size, t.world_size);
  EXPECT_EQ(t.local_rank, t.world_rank);
  ASSERT_EQ(static_cast<int>(t.hosts.size()), t.world_size);
  for (const auto& host : t.hosts) EXPECT_EQ(host, sys::host_name());
}

TEST(Topology, BroadcastBytesAndAllgatherString) {
  const Bootstrap& b = *testing::g_bootstrap;
  std::vector<std::uint8_t> bytes;
  if (b.world_rank() == 0) bytes = {1, 2, 3, 250};
  b.broadcast_bytes(bytes, 0);
  EXPECT_EQ(bytes, (std::vector<std::uint8_t>{1, 2, 3, 250}));
  const auto all = b.allgather_string(std::string(static_cast<size_t>(b.world_rank()), 'x'));
  ASSERT_EQ(static_cast<int>(all.size()), b.world_size());
  for (int r = 0; r < b.world_size(); ++r) EXPECT_EQ(all[static_cast<size_t>(r)], std::string(static_cast<size_t>(r), 'x'));
  EXPECT_TRUE(b.all_true(true));
  EXPECT_FALSE(b.all_true(b.world_rank() != 0));  // rank 0 says no
}

}  // namespace
}  // namespace hpctrain::comm
