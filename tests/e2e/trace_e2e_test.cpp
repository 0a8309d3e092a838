// log.trace_steps through the real executable at -np 2: each rank writes trace/rank-<r>.json with
// the spans of exactly the steps asked for, on their threads' tracks, nested as the step nests
// them; a bucket's reduction on the communication thread overlaps backward; a checkpoint and an
// evaluation in the range are spans too; `hpctrain trace merge` joins the ranks, one process each,
// and refuses a file that is not a timeline in one line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
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

struct Span {
  std::string name;
  double start = 0;
  double end = 0;
  json args;
};

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

// Track name -> its spans, sorted by start (the longer first at a tie: the outer one).
std::map<std::string, std::vector<Span>> tracks_of(const json& doc) {
  std::map<int, std::string> names;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"].get<int>()] = e["args"]["name"];
  }
  std::map<std::string, std::vector<Span>> tracks;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_EQ(names.count(e["tid"].get<int>()), 1u) << "a span on an unnamed track: " << e;
    const double start = e["ts"];
    tracks[names[e["tid"].get<int>()]].push_back({e["name"], start, start + e["dur"].get<double>(), e["args"]});
  }
  for (auto& [name, spans] : tracks) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
  }
  return tracks;
}

// Spans of one thread either nest or follow each other; returns each span's parent's name ("" at
// the top).
std::vector<std::string> parents_checking_nesting(const std::vector<Span>& spans) {
  constexpr double kRounding = 0.01;  // the file's microseconds have three decimals
  std::vector<const Span*> open;
  std::vector<std::string> parents;
  for (const Span& span : spans) {
    while (!open.empty() && open.back()->end <= span.start + kRounding) open.pop_back();
    if (!open.empty()) {
      EXPECT_LE(span.end, open.back()->end + kRounding)
          << span.name << " starts inside " << open.back()->name << " but ends after it";
    }
    parents.push_back(open.empty() ? "" : open.back()->name);
    open.push_back(&span);
  }
  return parents;
}

class TraceEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const FashionSuite suite = make_fashion_suite("trace", 1200, 2);
    work_ = suite.work;
    data_ = suite.data;
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }

  static std::string work_;
  static std::string data_;
};

std::string TraceEndToEnd::work_;
std::string TraceEndToEnd::data_;

TEST_F(TraceEndToEnd, EachRankWritesTheStepsAskedForAndMergeJoinsThem) {
  const std::string run = work_ + "/run";
  // Steps 3-4 of 6, with a checkpoint and an evaluation after step 4; small buckets, so several
  // reductions run during backward.
  const ProcessResult r = run_command(
      mpirun(2) + kBin + " train --config " + kSource + "/configs/fashion_cnn.ini --data.path=" + data_ +
      " --run.dir=" + run + " --train.threads=1 --train.batch_size=32 --train.max_steps=6 --ckpt.every_steps=4" +
      " --train.eval_every=4 --data.eval_split=test --dist.bucket_mb=0.05 --log.tensorboard=false" +
      " --log.trace_steps=3-4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE((r.out + r.err).find("timeline of steps 3-4"), std::string::npos) << r.err;

  std::int64_t all_spans = 0;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json doc = read_json(run + "/trace/rank-" + std::to_string(rank) + ".json");
    EXPECT_EQ(doc["otherData"]["rank"], rank);
    EXPECT_EQ(doc["otherData"]["first_step"], 3);
    EXPECT_EQ(doc["otherData"]["last_step"], 4);
    const auto tracks = tracks_of(doc);
    ASSERT_EQ(tracks.count("train"), 1u);
    ASSERT_EQ(tracks.count("comm"), 1u);
    for (const auto& [name, spans] : tracks) all_spans += static_cast<std::int64_t>(spans.size());

    const std::vector<Span>& train = tracks.at("train");
    const std::vector<std::string> parents = parents_checking_nesting(train);
    std::vector<std::int64_t> steps;
    std::multiset<std::string> in_steps;
    for (size_t i = 0; i < train.size(); ++i) {
      if (train[i].name == "step") steps.push_back(train[i].args["step"]);
      if (parents[i] == "step") in_steps.insert(train[i].name);
    }
    EXPECT_EQ(steps, (std::vector<std::int64_t>{3, 4}));
    for (const char* part : {"data wait", "forward", "backward", "gradient wait", "optimizer"}) {
      EXPECT_EQ(in_steps.count(part), 2u) << part << " is not once inside each step";
    }
    EXPECT_EQ(in_steps.count("checkpoint"), 1u);
    EXPECT_EQ(in_steps.count("evaluation"), 1u);

    // A bucket's reduction starts during a backward and runs on while it does.
    parents_checking_nesting(tracks.at("comm"));
    int overlapping = 0;
    std::set<std::int64_t> buckets;
    for (const Span& reduce : tracks.at("comm")) {
      if (reduce.name != "allreduce" || !reduce.args.contains("bucket")) continue;
      buckets.insert(reduce.args["bucket"].get<std::int64_t>());
      EXPECT_GT(reduce.args["bytes"].get<std::int64_t>(), 0);
      for (const Span& backward : train) {
        if (backward.name == "backward" && reduce.start > backward.start && reduce.start < backward.end) ++overlapping;
      }
    }
    EXPECT_GE(buckets.size(), 2u);
    EXPECT_GE(overlapping, 1) << "no bucket's reduction started during backward";
  }

  const ProcessResult merge = run_command(kBin + " trace merge " + run);
  ASSERT_EQ(merge.exit_code, 0) << merge.err;
  EXPECT_NE(merge.out.find("wrote " + run + "/trace/all-ranks.json (2 rank(s))"), std::string::npos) << merge.out;
  const json merged = read_json(run + "/trace/all-ranks.json");
  std::set<int> pids;
  std::int64_t merged_spans = 0;
  std::set<std::string> processes;
  for (const json& e : merged["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "X") ++merged_spans;
    if (e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(processes, (std::set<std::string>{"rank 0", "rank 1"}));
  EXPECT_EQ(merged_spans, all_spans);

  std::ofstream(run + "/trace/rank-7.json") << "{\"traceEvents\": [";
  const ProcessResult bad = run_command(kBin + " trace merge " + run);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("rank-7.json: not JSON"), std::string::npos) << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  const ProcessResult none = run_command(kBin + " trace merge " + work_);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--log.trace_steps=A-B"), std::string::npos) << none.err;
}

// log.profile_steps: every rank's table of the operators of the steps asked for, a convolution's
// among them, each operator's self time within its total.
TEST_F(TraceEndToEnd, EachRankWritesTheOperatorTableOfTheStepsAskedFor) {
  const std::string run = work_ + "/profiled";
  const ProcessResult r = run_command(
      mpirun(2) + kBin + " train --config " + kSource + "/configs/fashion_cnn.ini --data.path=" + data_ +
      " --run.dir=" + run + " --train.threads=1 --train.batch_size=32 --train.max_steps=4 --data.eval_split=" +
      " --log.tensorboard=false --log.profile_steps=2-3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("log.profile_steps: the operators of steps 2-3 in " + run + "/profile/rank-0.tsv"),
            std::string::npos)
      << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::istringstream table(read_file(run + "/profile/rank-" + std::to_string(rank) + ".tsv"));
    std::string line;
    ASSERT_TRUE(std::getline(table, line));
    EXPECT_EQ(line.rfind("# 2 optimizer step(s), ", 0), 0u) << line;
    ASSERT_TRUE(std::getline(table, line));
    EXPECT_EQ(line, "name\tcalls\tself_ms\ttotal_ms");
    bool convolution = false;
    double previous_self = 1e300;
    while (std::getline(table, line)) {
      std::istringstream fields(line);
      std::string name;
      std::int64_t calls = 0;
      double self_ms = 0;
      double total_ms = 0;
      ASSERT_TRUE(std::getline(fields, name, '\t') && fields >> calls >> self_ms >> total_ms) << line;
      EXPECT_GE(calls, 1) << line;
      EXPECT_LE(self_ms, total_ms + 1e-9) << line;
      EXPECT_LE(self_ms, previous_self) << "not most expensive first: " << line;
      previous_self = self_ms;
      convolution = convolution || name == "aten::convolution";
    }
    EXPECT_TRUE(convolution) << "rank " << rank;
  }
}

}  // namespace
}  // namespace hpctrain::testing
