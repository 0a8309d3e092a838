// The timeline of log.trace_steps (core/trace.h): only the steps in range are recorded, each thread
// on its named track, a NCCL-style span on a track of its own; the file is written once, after the
// range, as Chrome trace events that observe/timeline_merge.h takes back.
#include "hpctrain/core/trace.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/observe/timeline_merge.h"

namespace hpctrain::trace {
namespace {

using json = nlohmann::json;

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("hpctrain-trace-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "rank-3.json").string();
  }
  void TearDown() override { sys::remove_tree(dir_.string()); }

  std::filesystem::path dir_;
  std::string path_;
};

// Names of the spans of `doc` on the track named `track`, in order.
std::vector<std::string> spans_on(const json& doc, const std::string& track) {
  int tid = -1;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == track) tid = e["tid"];
  }
  std::vector<std::string> names;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "X" && e["tid"] == tid) names.push_back(e["name"]);
  }
  return names;
}

TEST_F(TraceTest, RecordsOnlyTheStepsInRangeAndWritesAfterTheLast) {
  EXPECT_FALSE(recording());
  { const Span before_start("not recorded"); }
  start(path_, 3, 2, 3);
  name_thread("train");
  begin_step(1);
  EXPECT_FALSE(recording());
  { const Span outside("outside the range"); }
  begin_step(2);
  EXPECT_TRUE(recording());
  {
    const Span step("step", {{"step", 2}});
    const Span forward("forward");
  }
  std::thread comm([] {
    name_thread("comm");
    const BucketScope bucket(4);
    const Span reduce("allreduce", {{"bucket", BucketScope::current()}, {"bytes", 64}});
  });
  comm.join();
  EXPECT_EQ(BucketScope::current(), -1);
  add_span("nccl (issue to wait)", "reduce_scatter", now_us() - 10, now_us());
  begin_step(3);
  { const Span step("step", {{"step", 3}}); }
  EXPECT_FALSE(std::filesystem::exists(path_));
  begin_step(4);
  EXPECT_FALSE(recording());
  ASSERT_TRUE(std::filesystem::exists(path_));
  { const Span after("after the write"); }
  finish();  // written already: nothing more

  const json doc = json::parse(read(path_));
  EXPECT_EQ(doc["otherData"]["rank"], 3);
  EXPECT_EQ(doc["otherData"]["first_step"], 2);
  EXPECT_EQ(doc["otherData"]["last_step"], 3);
  EXPECT_EQ(spans_on(doc, "train"), (std::vector<std::string>{"forward", "step", "step"}));
  EXPECT_EQ(spans_on(doc, "comm"), (std::vector<std::string>{"allreduce"}));
  EXPECT_EQ(spans_on(doc, "nccl (issue to wait)"), (std::vector<std::string>{"reduce_scatter"}));
  for (const json& e : doc["traceEvents"]) {
    EXPECT_EQ(e["pid"], 3);
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    if (e["name"] == "allreduce") {
      EXPECT_EQ(e["args"], (json{{"bucket", 4}, {"bytes", 64}}));
    }
  }
  observe::TimelineMerger merger;
  const observe::TimelineFacts facts = merger.add(read(path_), path_);
  EXPECT_EQ(facts.rank, 3);
  EXPECT_EQ(facts.spans, 5);
}

TEST_F(TraceTest, ARunThatEndsInsideTheRangeIsWrittenAtFinish) {
  start(path_, 0, 1, 100);
  begin_step(1);
  { const Span step("step"); }
  finish();
  const json doc = json::parse(read(path_));
  EXPECT_EQ(doc["otherData"]["last_step"], 1);
}

TEST_F(TraceTest, ARunThatEndsBeforeTheRangeWritesNothing) {
  start(path_, 0, 50, 60);
  begin_step(1);
  { const Span step("step"); }
  finish();
  EXPECT_FALSE(std::filesystem::exists(path_));
}

TEST(TimelineMergerTest, RefusesWhatIsNotATimelineNamingTheFile) {
  const auto refusal = [](const std::string& text) {
    observe::TimelineMerger merger;
    try {
      merger.add(text, "trace/rank-0.json");
    } catch (const ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  const std::string ok_other = R"("otherData":{"rank":0,"host":"h","first_step":1,"last_step":2})";
  EXPECT_NE(refusal("{").find("trace/rank-0.json: not JSON"), std::string::npos);
  EXPECT_NE(refusal("[]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(refusal(R"({"traceEvents":[]})").find("'otherData'"), std::string::npos);
  EXPECT_NE(refusal("{" + ok_other + "}").find("'traceEvents'"), std::string::npos);
  EXPECT_NE(refusal(R"({"otherData":{"rank":-1,"host":"h","first_step":1,"last_step":2},"traceEvents":[]})")
                .find("out of range"),
            std::string::npos);
  EXPECT_NE(refusal("{" + ok_other + R"(,"traceEvents":[{"ph":"X","pid":1,"tid":0,"name":"a","ts":1,"dur":1}]})")
                .find("pid is not the file's rank"),
            std::string::npos);
  EXPECT_NE(refusal("{" + ok_other + R"(,"traceEvents":[{"ph":"X","pid":0,"tid":0,"name":"a","ts":1,"dur":-1}]})")
                .find("negative duration"),
            std::string::npos);
  EXPECT_NE(refusal("{" + ok_other + R"(,"traceEvents":[{"ph":"B","pid":0,"tid":0,"name":"a"}]})").find("phase"),
            std::string::npos);
  EXPECT_EQ(refusal("{" + ok_other + R"(,"traceEvents":[{"ph":"X","pid":0,"tid":0,"name":"a","ts":1,"dur":1}]})"),
            "accepted");

  observe::TimelineMerger merger;
  const std::string twice = "{" + ok_other + R"(,"traceEvents":[]})";
  merger.add(twice, "a.json");
  EXPECT_THROW(merger.add(twice, "b.json"), ConfigError);
}

}  // namespace
}  // namespace hpctrain::trace
