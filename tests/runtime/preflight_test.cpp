#include "hpctrain/runtime/preflight.h"

#include <gtest/gtest.h>

namespace hpctrain::runtime {
namespace {

comm::Topology node_of_two(int rank, const std::string& host_a, const std::string& host_b) {
  comm::Topology t;
  t.world_rank = rank;
  t.world_size = 2;
  t.local_rank = 0;
  t.local_size = 1;
  t.hosts = {host_a, host_b};
  return t;
}

// Two ranks; `bus_ids`: the PCI bus id each one's GPU reports ("" when unknown).
std::vector<RankFacts> two_ranks(const c10::Device& d0, const c10::Device& d1, const std::string& host_b,
                                 const std::string& visible = "",
                                 const std::pair<std::string, std::string>& bus_ids = {}) {
  return {local_facts(node_of_two(0, "a", host_b), d0, "[train]\nseed = 1\n", bus_ids.first, visible),
          local_facts(node_of_two(1, "a", host_b), d1, "[train]\nseed = 1\n", bus_ids.second, visible)};
}

TEST(Preflight, AgreeingRanksHaveNoProblems) {
  const auto facts = two_ranks(c10::Device("cuda:0"), c10::Device("cuda:1"), "a");
  EXPECT_TRUE(world_problems(facts).empty());
  EXPECT_TRUE(device_problems(facts, false).empty());
  EXPECT_EQ(facts[0].host, "a");
  EXPECT_EQ(facts[1].gpu, "1");
  EXPECT_TRUE(device_problems(two_ranks(at::kCPU, at::kCPU, "a"), false).empty());
}

TEST(Preflight, ADifferentConfigOrVersionIsNamedByRank) {
  auto facts = two_ranks(at::kCPU, at::kCPU, "b");
  facts[1].config_hash = "other";
  facts[1].version = "hpctrain 9.9.9, libtorch 2.4.0";
  const auto problems = world_problems(facts);
  ASSERT_EQ(problems.size(), 2u);
  for (const auto& p : problems) EXPECT_EQ(p.rfind("rank 1 (b)", 0), 0u) << p;
  EXPECT_NE(problems[0].find("hpctrain 9.9.9"), std::string::npos);
  EXPECT_NE(problems[1].find("different config"), std::string::npos);
}

TEST(Preflight, TwoRanksOnOneGpuOfOneHostAreRefusedUnlessAllowed) {
  const auto same = two_ranks(c10::Device("cuda:0"), c10::Device("cuda:0"), "a");
  const auto problems = device_problems(same, false);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("rank 1 (a) and rank 0 share GPU 0"), std::string::npos) << problems[0];
  EXPECT_TRUE(device_problems(same, true).empty());
  // The same index on two hosts is two GPUs.
  EXPECT_TRUE(device_problems(two_ranks(c10::Device("cuda:0"), c10::Device("cuda:0"), "b"), false).empty());
}

TEST(Preflight, ThePciBusIdNamesThePhysicalGpu) {
  // A GPU bound per task (a cgroup renumbers it): both ranks see cuda:0 and CUDA_VISIBLE_DEVICES=0,
  // yet they are two GPUs.
  const auto bound = two_ranks(c10::Device("cuda:0"), c10::Device("cuda:0"), "a", "0",
                               {"0000:3b:00.0", "0000:5e:00.0"});
  EXPECT_EQ(bound[1].gpu, "0000:5e:00.0");
  EXPECT_TRUE(device_problems(bound, false).empty());
  const auto shared = two_ranks(c10::Device("cuda:0"), c10::Device("cuda:0"), "a", "",
                                {"0000:3b:00.0", "0000:3b:00.0"});
  EXPECT_EQ(device_problems(shared, false).size(), 1u);
}

TEST(Preflight, WithoutABusIdCudaVisibleDevicesNamesTheGpu) {
  const auto facts = two_ranks(c10::Device("cuda:0"), c10::Device("cuda:0"), "a", "3");
  EXPECT_EQ(facts[0].gpu, "3");
  EXPECT_EQ(device_problems(facts, false).size(), 1u);
  EXPECT_EQ(local_facts(node_of_two(0, "a", "a"), c10::Device("cuda:1"), "", "", "GPU-aa,GPU-bb").gpu, "GPU-bb");
}

TEST(Preflight, ACpuRankAmongGpuRanksIsNamed) {
  const auto problems = device_problems(two_ranks(c10::Device("cuda:0"), at::kCPU, "b"), false);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("rank 1 (b) computes on cpu, rank 0 on cuda:0"), std::string::npos) << problems[0];
}

}  // namespace
}  // namespace hpctrain::runtime
