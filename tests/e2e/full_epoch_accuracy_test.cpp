// The foundation's acceptance bar: one epoch of fashion_cnn on the full Fashion-MNIST at -np 2
// reaches at least 0.85 test accuracy.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>

#include "e2e.h"
#include "process.h"
#include "hpctrain/core/system.h"

namespace hpctrain::testing {
namespace {

TEST(FullEpoch, FashionCnnTwoRanksReaches85PercentInOneEpoch) {
  const std::string work = make_temp_dir("epoch");
  const ProcessResult p = prepare_fashion(work + "/data", 0);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const ProcessResult t = run_command(mpirun(2) + kBin + " train --config " + kSource +
                                      "/configs/fashion_cnn.ini --data.path=" + work +
                                      "/data --run.dir=" + work + "/run --train.epochs=1");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  double accuracy = -1;
  std::istringstream in(read_file(work + "/run/metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("test_acc")) accuracy = record["test_acc"].get<double>();
  }
  EXPECT_GE(accuracy, 0.85) << t.err;
  hpctrain::sys::remove_tree(work);
}

}  // namespace
}  // namespace hpctrain::testing
