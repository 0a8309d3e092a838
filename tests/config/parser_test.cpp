#include "hpctrain/config/parser.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"

namespace hpctrain::config {
namespace {

namespace fs = std::filesystem;

class ParserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hpctrain_parser_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { hpctrain::sys::remove_tree(dir_); }

  std::string write_ini(const std::string& text) {
    const std::string path = (dir_ / "test.ini").string();
    std::ofstream(path) << text;
    return path;
  }

  // The ConfigError message of parsing `args`, or "" when it parses.
  static std::string error_of(const std::vector<std::string>& args) {
    try {
      parse_args(args, {}, true, true);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(ParserTest, IniValuesAreTypedAndCommandLineWins) {
  const std::string ini = write_ini(
      "[data]\npath = /data/x\n[train]\nepochs = 3\nbatch_size = 32\n[optim]\nlr = 0.01\n"
      "[log]\nall_ranks = true\n");
  const ParsedArgs parsed = parse_args({"--config", ini, "--train.epochs=5"}, {}, true, true);
  EXPECT_EQ(parsed.config.data.path, "/data/x");
  EXPECT_EQ(parsed.config.train.epochs, 5);
  EXPECT_EQ(parsed.config.train.batch_size, 32);
  EXPECT_DOUBLE_EQ(parsed.config.optim.lr, 0.01);
  EXPECT_TRUE(parsed.config.log.all_ranks);
  EXPECT_EQ(parsed.config_file, ini);
}

TEST_F(ParserTest, SpaceSeparatedValueAndDefaults) {
  const ParsedArgs parsed = parse_args({"--data.path", "/d", "--optim.name", "sgd"}, {}, true, true);
  EXPECT_EQ(parsed.config.data.path, "/d");
  EXPECT_EQ(parsed.config.optim.name, OptimizerName::kSgd);
  EXPECT_EQ(parsed.config.model.name, ModelName::kFashionCnn);
  EXPECT_EQ(parsed.config.run.dir, "runs/default");
}

TEST_F(ParserTest, ResolvedIniReadsBackToTheSameConfig) {
  const ParsedArgs first = parse_args({"--data.path=/d", "--train.seed=9", "--model.dropout=0.5"}, {},
                                      true, true);
  const std::string text = to_ini(first.config);
  const ParsedArgs second = parse_args({"--config", write_ini(text)}, {}, true, true);
  EXPECT_EQ(to_ini(second.config), text);
}

TEST_F(ParserTest, UnknownIniKeySuggestsTheClosest) {
  const std::string ini = write_ini("[data]\npath = /d\n[train]\nepoch = 3\n");
  const std::string message = error_of({"--config", ini});
  EXPECT_NE(message.find(ini), std::string::npos) << message;
  EXPECT_NE(message.find("unknown option 'train.epoch'"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'train.epochs'"), std::string::npos) << message;
}

TEST_F(ParserTest, UnknownCommandLineOptionSuggestsTheClosest) {
  const std::string message = error_of({"--data.path=/d", "--optim.learning_rate=1"});
  EXPECT_NE(message.find("command line"), std::string::npos) << message;
  EXPECT_NE(message.find("--optim.learning_rate"), std::string::npos) << message;
  const std::string close = error_of({"--data.path=/d", "--optim.lrr=1"});
  EXPECT_NE(close.find("did you mean 'optim.lr'"), std::string::npos) << close;
}

TEST_F(ParserTest, KeyOutsideASectionIsAnError) {
  const std::string message = error_of({"--config", write_ini("epochs = 3\n")});
  EXPECT_NE(message.find("outside a [section]"), std::string::npos) << message;
}

TEST_F(ParserTest, WrongTypesNameKeyAndAllowedValues) {
  const std::string not_int = error_of({"--data.path=/d", "--train.epochs=abc"});
  EXPECT_NE(not_int.find("train.epochs"), std::string::npos) << not_int;
  EXPECT_NE(not_int.find("not an integer"), std::string::npos) << not_int;
  EXPECT_NE(not_int.find("allowed: int >= 1"), std::string::npos) << not_int;

  const std::string not_float = error_of({"--data.path=/d", "--optim.lr=fast"});
  EXPECT_NE(not_float.find("not a finite number"), std::string::npos) << not_float;

  const std::string not_bool = error_of({"--data.path=/d", "--log.all_ranks=maybe"});
  EXPECT_NE(not_bool.find("not a boolean"), std::string::npos) << not_bool;

  const std::string trailing = error_of({"--data.path=/d", "--train.batch_size=64x"});
  EXPECT_NE(trailing.find("not an integer"), std::string::npos) << trailing;
}

TEST_F(ParserTest, OutOfRangeValuesAreRejected) {
  EXPECT_NE(error_of({"--data.path=/d", "--train.batch_size=0"}).find("must be >= 1"), std::string::npos);
  EXPECT_NE(error_of({"--data.path=/d", "--optim.lr=0"}).find("must be > 0"), std::string::npos);
  EXPECT_NE(error_of({"--data.path=/d", "--optim.lr=nan"}).find("not a finite number"), std::string::npos);
  EXPECT_NE(error_of({"--data.path=/d", "--model.dropout=1.5"}).find("[0, 1)"), std::string::npos);
  const std::string choice = error_of({"--data.path=/d", "--optim.name=adam"});
  EXPECT_NE(choice.find("must be one of adamw|sgd"), std::string::npos) << choice;
  EXPECT_NE(error_of({"--data.path=/d", "--model.mlp_hidden=64,,32"}).find("comma-separated"),
            std::string::npos);
  EXPECT_NE(error_of({"--data.path=/d", "--train.epochs=99999999999999999999"}).find("not an integer"),
            std::string::npos);
}

TEST_F(ParserTest, MissingFileIsAnError) {
  const std::string message = error_of({"--config", (dir_ / "nope.ini").string()});
  EXPECT_NE(message.find("nope.ini' not found"), std::string::npos) << message;
}

TEST_F(ParserTest, MissingRequiredOptionSaysHowToSetIt) {
  const std::string message = error_of({"--train.epochs=2"});
  EXPECT_NE(message.find("missing required option data.path"), std::string::npos) << message;
  EXPECT_NE(message.find("[data]"), std::string::npos) << message;
  EXPECT_NE(message.find("--data.path="), std::string::npos) << message;
}

TEST_F(ParserTest, IncompleteConfigIsAllowedWhenNotRequired) {
  EXPECT_NO_THROW(parse_args({"--train.epochs=2"}, {}, true, false));
}

TEST_F(ParserTest, MalformedIniLineIsAnError) {
  const std::string message = error_of({"--config", write_ini("[train]\nthis line has no equals\n")});
  EXPECT_NE(message.find("test.ini"), std::string::npos) << message;
}

// The last of two would win silently: both lines are named instead.
TEST_F(ParserTest, AKeyGivenTwiceInOneFileIsRefusedWithBothLines) {
  const std::string ini = write_ini("[data]\npath = /d\n[train]\nepochs = 3\n# epochs = 9\nbatch_size = 8\n"
                                    "  epochs=4   # again\n");
  const std::string message = error_of({"--config", ini});
  EXPECT_NE(message.find(ini + ":7: train.epochs is given twice, on lines 4 and 7"), std::string::npos) << message;
  // One name in two sections is two keys; a comment is no key.
  const std::string sections = write_ini("[data]\npath = /d\n[train]\nseed = 3\n[ckpt]\n#seed = 1\n");
  EXPECT_EQ(error_of({"--config", sections}), "");
}

// Editors on Windows save UTF-8 with a byte-order mark first.
TEST_F(ParserTest, AByteOrderMarkIsAccepted) {
  const ParsedArgs parsed = parse_args({"--config", write_ini("\xEF\xBB\xBF[train]\nepochs = 7\n[data]\npath = /d\n")},
                                       {}, true, true);
  EXPECT_EQ(parsed.config.train.epochs, 7);
  EXPECT_EQ(parsed.config.data.path, "/d");
}

TEST_F(ParserTest, CommandFlagsAndPositionalsAreSeparated) {
  const ParsedArgs parsed = parse_args({"fashion-mnist", "--out", "x", "--overwrite"},
                                       {{"out", true, ""}, {"overwrite", false, ""}}, false, false);
  EXPECT_EQ(parsed.positionals, std::vector<std::string>{"fashion-mnist"});
  EXPECT_EQ(parsed.flags.at("out"), "x");
  EXPECT_TRUE(parsed.has("overwrite"));
  // Table options are not accepted where the command takes none.
  EXPECT_THROW(parse_args({"--train.epochs=2"}, {}, false, false), ConfigError);
}

TEST_F(ParserTest, EmptyValueAfterEqualsIsAccepted) {
  const ParsedArgs parsed = parse_args({"--data.path=/d", "--data.eval_split="}, {}, true, true);
  EXPECT_EQ(parsed.config.data.eval_split, "");
}

TEST(ClosestMatch, FindsNearAndRejectsFar) {
  EXPECT_EQ(closest_match("optim.lrate", {"optim.name", "optim.lr"}), "optim.lr");
  EXPECT_EQ(closest_match("train.epoch", {"train.epochs", "train.seed"}), "train.epochs");
  EXPECT_EQ(closest_match("zzzzzzzz", {"train.epochs", "train.seed"}), "");
}

}  // namespace
}  // namespace hpctrain::config
