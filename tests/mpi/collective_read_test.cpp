// data.io=mpio: a split read by all ranks together through MPI-IO holds exactly what each rank
// reads on its own.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <filesystem>

#include "hpctrain/core/system.h"
#include "hpctrain/data/manifest.h"
#include "hpctrain/data/shard_writer.h"
#include "hpctrain/data/split.h"
#include "mpi_fixture.h"

namespace hpctrain {
namespace {

// 301 samples of uint8[2,7] with value (i + j) % 251 and label i % 9, in 3 shards; written by
// rank 0 into a folder whose name every rank receives.
std::string write_dataset(const comm::Bootstrap& boot) {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("hpctrain_mpio_" + std::to_string(::getpid()))).string();
  std::vector<std::uint8_t> name(dir.begin(), dir.end());
  boot.broadcast_bytes(name, 0);
  dir.assign(name.begin(), name.end());
  if (boot.world_rank() == 0) {
    constexpr std::int64_t kSamples = 301;
    std::vector<std::uint8_t> x(kSamples * 14);
    std::vector<std::int64_t> y(kSamples);
    for (std::int64_t i = 0; i < kSamples; ++i) {
      for (std::int64_t j = 0; j < 14; ++j) x[static_cast<size_t>(i * 14 + j)] = static_cast<std::uint8_t>((i + j) % 251);
      y[static_cast<size_t>(i)] = i % 9;
    }
    sys::remove_tree(dir);
    std::filesystem::create_directories(dir);
    data::Manifest m;
    m.name = "mpio";
    m.num_classes = 9;
    m.fields = {{"image", io::DType::kUInt8, {2, 7}}, {"label", io::DType::kInt64, {}}};
    data::ShardingOptions sharding;
    sharding.shards = 3;
    m.splits["train"] = data::write_split(dir, "train", m.fields, {x.data(), y.data()}, kSamples, sharding);
    m.save(dir);
  }
  boot.barrier();
  return dir;
}

TEST(CollectiveRead, EveryRankHoldsTheWholeSplitAsItsOwnReadsWouldGiveIt) {
  const comm::Bootstrap& boot = *testing::g_bootstrap;
  const std::string dir = write_dataset(boot);
  // Read collectively into memory (data.io=mpio), against this rank's mapped files.
  const data::Split collective = data::Split::load(dir, "train", std::int64_t{256} << 20, data::ShardAccess::kRead);
  const data::Split own = data::Split::load(dir, "train");
  ASSERT_TRUE(own.maps_files()) << own.why_not_mapped();
  ASSERT_TRUE(collective.caches_blocks());
  collective.preload_collective();
  own.preload();
  std::vector<std::int64_t> all(static_cast<size_t>(collective.size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>((i * 37) % all.size());
  const data::Batch a = collective.gather(all);
  const data::Batch b = own.gather(all);
  EXPECT_TRUE(at::equal(a.input, b.input));
  EXPECT_TRUE(at::equal(a.target, b.target));
  EXPECT_EQ(a.input[5][1][3].item<std::int64_t>(), (all[5] + 10) % 251);
  EXPECT_EQ(a.target[7].item<std::int64_t>(), all[7] % 9);
  boot.barrier();
  if (boot.world_rank() == 0) sys::remove_tree(dir);
}

}  // namespace
}  // namespace hpctrain
