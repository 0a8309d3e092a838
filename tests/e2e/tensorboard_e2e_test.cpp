// log.tensorboard through the real executable: the event file a run writes is read back by an
// independent reader (tests/support/read_tfevents.py: crcmod's CRC-32C, its own protobuf
// decoding), every CRC checks, every number of metrics.jsonl is in it at its step, the config is
// its text; a resumed run opens a new file, the old one cut back to the checkpoint, so no step is
// written twice; log.tensorboard=false writes none.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "e2e.h"
#include "process.h"
#include "hpctrain/core/system.h"

namespace hpctrain::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kReader = "/usr/bin/python3 " + kSource + "/tests/support/read_tfevents.py";

class TensorBoardEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const FashionSuite suite = make_fashion_suite("tensorboard", 1200, 2);
    work_ = suite.work;
    data_ = suite.data;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  static std::string train(const std::string& run, const std::string& extra) {
    return mpirun(2) + kBin + " train --config " + kSource + "/configs/fashion_cnn.ini --data.path=" + data_ +
           " --run.dir=" + work_ + "/" + run + " --train.threads=1 --train.batch_size=32 --log.every_steps=2" +
           " --ckpt.keep_last=0 " + extra;
  }

  // The event files of `run`, oldest first (their names start with the Unix time).
  static std::vector<std::string> event_files(const std::string& run) {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(work_ + "/" + run + "/tensorboard")) {
      files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
    return files;
  }

  static json read_events(const std::vector<std::string>& files) {
    std::string command = kReader;
    for (const std::string& file : files) command += " " + file;
    const ProcessResult read = run_command(command);
    EXPECT_EQ(read.exit_code, 0) << read.out << read.err;
    return json::parse(read.out);
  }

  static std::vector<json> metrics(const std::string& run) { return read_jsonl(work_ + "/" + run + "/metrics.jsonl"); }

  static std::string work_;
  static std::string data_;
};

std::string TensorBoardEndToEnd::work_;
std::string TensorBoardEndToEnd::data_;

TEST_F(TensorBoardEndToEnd, EveryMetricsNumberIsInTheEventFileAtItsStep) {
  const ProcessResult r = run_command(train("one", "--train.max_steps=8 --data.eval_split=test"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> files = event_files("one");
  ASSERT_EQ(files.size(), 1u);
  const std::string name = fs::path(files[0]).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_NE(name.find("." + hpctrain::sys::host_name() + "."), std::string::npos) << name;
  const json events = read_events(files)[0];
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["file_version"], "brain.Event:2");
  EXPECT_EQ(events[1]["texts"]["config"], read_file(work_ + "/one/config.ini"));

  std::map<std::pair<std::int64_t, std::string>, double> scalars;
  for (const json& event : events) {
    if (!event.contains("scalars")) continue;
    for (const auto& [tag, value] : event["scalars"].items()) {
      const bool fresh = scalars.emplace(std::make_pair(event["step"].get<std::int64_t>(), tag), value).second;
      EXPECT_TRUE(fresh) << tag << " twice at step " << event["step"];
    }
  }
  std::set<std::pair<std::int64_t, std::string>> compared;  // an evaluation repeats its step's epoch
  std::set<std::string> tags;
  for (const json& record : metrics("one")) {
    ASSERT_TRUE(record.contains("step")) << record;
    for (const auto& [field, value] : record.items()) {
      if (field == "step" || field == "unix_time" || !value.is_number()) continue;
      const auto found = scalars.find({record["step"].get<std::int64_t>(), field});
      ASSERT_NE(found, scalars.end()) << field << " at step " << record["step"] << " is not in the event file";
      const double expected = value.get<double>();
      EXPECT_NEAR(found->second, expected, 1e-6 * std::max(1.0, std::fabs(expected))) << field;
      tags.insert(field);
      compared.insert(found->first);
    }
  }
  EXPECT_EQ(compared.size(), scalars.size()) << "the event file holds numbers metrics.jsonl does not";
  for (const char* tag : {"loss", "lr", "samples_per_s", "step_ms", "test_loss", "test_acc"}) {
    EXPECT_EQ(tags.count(tag), 1u) << tag;
  }
}

TEST_F(TensorBoardEndToEnd, AResumedRunOpensANewFileAndWritesNoStepTwice) {
  // Checkpoints at 4 and 8, records up to 10: the resume from 8 rewrites 10.
  const ProcessResult first = run_command(train("resumed", "--train.max_steps=10 --ckpt.every_steps=4 "
                                                           "--ckpt.save_final=false --data.eval_split="));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const ProcessResult second = run_command(train("resumed", "--train.max_steps=12 --data.eval_split="));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(count_lines_with(second.err, "resumed from "), 1) << second.err;
  EXPECT_EQ(count_lines_with(second.err, "cut back to the events of steps <= 8"), 1) << second.err;
  const std::vector<std::string> files = event_files("resumed");
  ASSERT_EQ(files.size(), 2u);
  const json events = read_events(files);
  std::vector<std::int64_t> loss_steps;
  for (const json& file : events) {
    EXPECT_EQ(file[0]["file_version"], "brain.Event:2");
    for (const json& event : file) {
      if (event.contains("scalars") && event["scalars"].contains("loss")) loss_steps.push_back(event["step"]);
    }
  }
  EXPECT_EQ(loss_steps, (std::vector<std::int64_t>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(events[1][1]["step"], 8) << "the second file's config is at the step it resumed from";
}

TEST_F(TensorBoardEndToEnd, OffWritesNoEventFile) {
  const ProcessResult r = run_command(train("off", "--train.max_steps=2 --data.eval_split= --log.tensorboard=false"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(work_ + "/off/tensorboard"));
}

}  // namespace
}  // namespace hpctrain::testing
