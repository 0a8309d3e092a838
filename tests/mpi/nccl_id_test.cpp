// The NCCL communicator's rendezvous up to the point where NCCL needs a GPU (ncclCommInitRank):
// rank 0's unique id reaches every rank, byte for byte, over MPI. Built where NCCL is found; runs
// without a GPU (ncclGetUniqueId opens rank 0's bootstrap socket only).
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/nccl/nccl_communicator.h"
#include "mpi_fixture.h"

namespace hpctrain::comm {
namespace {

std::string hex(const std::vector<std::uint8_t>& bytes) {
  std::string text;
  char two[3];
  for (const std::uint8_t b : bytes) {
    std::snprintf(two, sizeof(two), "%02x", b);
    text += two;
  }
  return text;
}

TEST(NcclId, RankZerosIdReachesEveryRankByteForByte) {
  const Bootstrap& bootstrap = *testing::g_bootstrap;
  const std::vector<std::uint8_t> id = shared_nccl_id(bootstrap);
  ASSERT_EQ(id.size(), sizeof(ncclUniqueId));
  EXPECT_NE(hex(id), std::string(2 * sizeof(ncclUniqueId), '0')) << "an id of zeros";
  for (const std::string& other : bootstrap.allgather_string(hex(id))) EXPECT_EQ(other, hex(id));
  EXPECT_NE(hex(shared_nccl_id(bootstrap)), hex(id)) << "a second id is made anew";
}

}  // namespace
}  // namespace hpctrain::comm
