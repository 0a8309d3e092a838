#include "hpctrain/config/option_table.h"

#include <gtest/gtest.h>

#include <set>

#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"

namespace hpctrain::config {
namespace {

TEST(OptionTable, NamesAreSectionDotSnakeCaseAndUnique) {
  std::set<std::string> seen;
  for (const auto& option : option_table()) {
    EXPECT_TRUE(seen.insert(option.name).second) << "duplicate " << option.name;
    const auto dot = option.name.find('.');
    ASSERT_NE(dot, std::string::npos) << option.name;
    EXPECT_EQ(option.name.find('.', dot + 1), std::string::npos) << option.name;
    for (char c : option.name) {
      EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.')
          << option.name;
    }
    EXPECT_FALSE(option.help.empty()) << option.name;
  }
}

TEST(OptionTable, FixedNamesExist) {
  // Later features, the docs and users' scripts rely on these names.
  for (const char* name : {"run.dir", "data.path", "model.name", "train.epochs", "train.max_steps",
                           "train.batch_size", "train.seed", "optim.name", "optim.lr",
                           "log.every_steps", "log.all_ranks"}) {
    EXPECT_NE(find_option(name), nullptr) << name;
  }
}

TEST(OptionTable, SectionsAreTheDocumentedOnes) {
  EXPECT_EQ(sections(), (std::vector<std::string>{"run", "data", "model", "optim", "train", "diffusion",
                                                  "dist", "ckpt", "log"}));
}

TEST(OptionTable, EveryDefaultPassesItsOwnCheckAndRendersBack) {
  Config config;
  for (const auto& option : option_table()) {
    if (!option.default_text) continue;
    ASSERT_NO_THROW(option.assign(config, *option.default_text)) << option.name;
    Config again;
    option.assign(again, option.render(config));
    EXPECT_EQ(option.render(again), option.render(config)) << option.name;
  }
}

TEST(OptionTable, DataPathIsRequired) {
  const Option* option = find_option("data.path");
  ASSERT_NE(option, nullptr);
  EXPECT_TRUE(option->required());
}

TEST(OptionTable, TraceStepsIsARangeOfSteps) {
  EXPECT_TRUE(parse_step_range("").empty());
  const StepRange range = parse_step_range("20-25");
  EXPECT_EQ(range.first, 20);
  EXPECT_EQ(range.last, 25);
  EXPECT_EQ(parse_step_range("7-7").last, 7);
  for (const char* wrong : {"20", "25-20", "0-3", "-3", "a-b", "3-", "1-2-3"}) {
    EXPECT_THROW(parse_step_range(wrong), ConfigError) << wrong;
  }
  const Option* option = find_option("log.trace_steps");
  ASSERT_NE(option, nullptr);
}

TEST(OptionTable, MarkdownListsEveryOption) {
  const std::string markdown = options_markdown();
  for (const auto& option : option_table()) {
    EXPECT_NE(markdown.find("`" + option.name + "`"), std::string::npos) << option.name;
  }
}

}  // namespace
}  // namespace hpctrain::config
