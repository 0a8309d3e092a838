// The executable's user-facing contract: help, version, and one clear line with exit code 2 for
// every configuration mistake, with nothing written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hpctrain/config/option_table.h"
#include "process.h"
#include "hpctrain/core/system.h"

namespace hpctrain::testing {
namespace {

namespace fs = std::filesystem;

const std::string kBin = HPCTRAIN_BIN;

TEST(Cli, HelpListsEveryOptionWithItsDefault) {
  for (const std::string& command : {kBin + " --help", kBin + " train --help"}) {
    const ProcessResult r = run_command(command);
    ASSERT_EQ(r.exit_code, 0) << command;
    for (const auto& option : config::option_table()) {
      EXPECT_NE(r.out.find("--" + option.name + "="), std::string::npos) << option.name << " in " << command;
      if (option.default_text) {
        EXPECT_NE(r.out.find("(default: " + *option.default_text + ")"), std::string::npos) << option.name;
      }
    }
  }
}

TEST(Cli, VersionNamesEveryLibrary) {
  const ProcessResult r = run_command(kBin + " --version");
  ASSERT_EQ(r.exit_code, 0);
  for (const char* name : {"hpctrain ", "libtorch ", "MPI ", "HDF5 ", "NCCL "}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name << " in " << r.out;
  }
  EXPECT_NE(r.out.find("Open MPI"), std::string::npos) << r.out;
}

TEST(Cli, NoArgumentsPrintsUsageWithExitCode2AndUnknownCommandIsOneLine) {
  EXPECT_EQ(run_command(kBin).exit_code, 2);
  const ProcessResult r = run_command(kBin + " trian");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines_with(r.err, "hpctrain: error: unknown command 'trian'"), 1) << r.err;
}

TEST(Cli, PrintConfigShowsTheResolvedConfig) {
  const ProcessResult r = run_command(kBin + " train --data.path=/d --train.epochs=7 --print-config");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[train]\nepochs = 7\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("path = /d"), std::string::npos) << r.out;
}

struct BadConfig {
  const char* name;
  const char* ini;    // written to a file and passed with --config ("" for none)
  const char* extra;  // more command-line arguments
  const char* expect; // part of the one error line
};

void PrintTo(const BadConfig& bad, std::ostream* os) { *os << bad.name; }

class CliConfigErrors : public ::testing::TestWithParam<BadConfig> {};

TEST_P(CliConfigErrors, ExitCode2OneLineNothingWritten) {
  const BadConfig& bad = GetParam();
  const std::string dir = make_temp_dir("clierr");
  std::string args = " --run.dir=" + dir + "/run";
  if (std::string(bad.ini) != "") {
    std::ofstream(dir + "/bad.ini") << bad.ini;
    args += " --config " + dir + "/bad.ini";
  }
  for (const std::string& launcher : {std::string(), mpirun(2)}) {
    const ProcessResult r = run_command(launcher + kBin + " train" + args + " " + bad.extra);
    EXPECT_EQ(r.exit_code, 2) << bad.name << ": " << r.err;
    EXPECT_EQ(count_lines_with(r.err, "hpctrain: error:"), 1) << bad.name << ": " << r.err;
    EXPECT_NE(r.err.find(bad.expect), std::string::npos) << bad.name << ": " << r.err;
    EXPECT_FALSE(fs::exists(dir + "/run")) << bad.name;
  }
  hpctrain::sys::remove_tree(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Table, CliConfigErrors,
    ::testing::Values(
        BadConfig{"unknown_ini_key", "[data]\npath = /d\n[train]\nbatchsize = 4\n", "",
                  "did you mean 'train.batch_size'"},
        BadConfig{"unknown_cli_key", "", "--data.path=/d --optim.lrate=1", "did you mean 'optim.lr'"},
        BadConfig{"wrong_type", "[data]\npath = /d\n[train]\nepochs = two\n", "",
                  "train.epochs: 'two' is not an integer"},
        BadConfig{"out_of_range", "", "--data.path=/d --train.batch_size=-3", "must be >= 1"},
        BadConfig{"bad_choice", "", "--data.path=/d --model.name=vgg", "must be one of"},
        BadConfig{"missing_file", "", "--config /nonexistent/x.ini", "not found"},
        BadConfig{"missing_required", "", "--train.epochs=1", "missing required option data.path"},
        BadConfig{"stray_argument", "", "--data.path=/d extra", "unexpected argument 'extra'"},
        BadConfig{"unknown_signal", "", "--data.path=/d --ckpt.signals=USR1,KILLME",
                  "has 'KILLME', not one of USR1, USR2, TERM, INT, HUP, XCPU"}),
    [](const ::testing::TestParamInfo<BadConfig>& param_info) { return std::string(param_info.param.name); });

TEST(Cli, MissingDatasetIsExitCode3WithNothingWritten) {
  const std::string dir = make_temp_dir("nodata");
  const ProcessResult r = run_command(mpirun(2) + kBin + " train --data.path=" + dir +
                                      "/none --run.dir=" + dir + "/run");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(count_lines_with(r.err, "hpctrain: error:"), 1) << r.err;
  EXPECT_NE(r.err.find("hpctrain prepare"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/run"));
  hpctrain::sys::remove_tree(dir);
}

// With no GPU visible (CUDA_VISIBLE_DEVICES empty hides any), asking for one stops every rank
// before MPI starts, with the way out in the message.
TEST(Cli, GpuOptionsWithoutAGpuAreExitCode2BeforeAnythingIsWritten) {
  const std::string dir = make_temp_dir("nogpu");
  const std::string train = " train --data.path=" + dir + "/none --run.dir=" + dir + "/run ";
  for (const auto& [options, expect] :
       {std::pair<std::string, std::string>{"--dist.device=cuda", "libtorch sees no GPU"},
        {"--dist.device=cpu --dist.backend=nccl", "dist.backend=nccl"},
        {"--dist.device=cpu --train.precision=fp16", "train.precision=fp16 needs a GPU"},
        {"--train.nonfinite=abort --train.loss_scale=dynamic", "train.nonfinite=abort with dynamic loss scaling"}}) {
    const ProcessResult r = run_command("env CUDA_VISIBLE_DEVICES= " + mpirun(2) + kBin + train + options);
    EXPECT_EQ(r.exit_code, 2) << options << ": " << r.err;
    EXPECT_EQ(count_lines_with(r.err, "hpctrain: error:"), 1) << options << ": " << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << options << ": " << r.err;
  }
  EXPECT_FALSE(fs::exists(dir + "/run"));
  hpctrain::sys::remove_tree(dir);
}

TEST(Cli, BenchArgumentErrorsAreOneLineWithExitCode2) {
  for (const auto& [args, expect] :
       {std::pair<std::string, std::string>{"bench comm --backend nccl", "nccl"},
        {"bench step --device tpu", "--device must be cpu or cuda"},
        {"bench step --device cuda", "use --device cpu"},
        {"bench step --layers 2", "--layers is for --model gpt"},
        {"bench step --model gpt --vocab 1", "--vocab >= 2"},
        {"bench step --model gpt --embd 100", "--embd 100 must be a multiple of --heads 12"},
        {"bench step --precision fp8", "--precision must be fp32, bf16 or fp16"},
        {"bench step --precision fp16", "--precision fp16 needs --device cuda"},
        {"bench step --tf32 yes", "--tf32 must be true or false"},
        {"bench step --cuda-graphs", "bench step does not use --cuda-graphs (it reads --model, "},
        {"bench step --update --optimizer sgd", "bench step --update does not use --optimizer"},
        {"bench step --update --cuda-graphs", "--cuda-graphs needs --device cuda"},
        {"bench step --zero-stage 1 --update", "bench step --zero-stage and --update are two measurements"},
        {"bench comm --min-bytes 1KiB --max-bytes 512", "--min-bytes <= --max-bytes"},
        {"bench data --layers 4", "unknown option '--layers'"},  // bench step's, not bench data's
        {"bench data --data /nowhere --data-io direct", "--data-io must be mmap or posix"},
        {"bench data --data /nowhere --io --data-io posix", "bench data --io does not use --data-io"},
        {"bench step extra", "bench step: unexpected argument 'extra'"},
        {"bench nothing", "expected 'data', 'comm' or 'step'"}}) {
    const ProcessResult r = run_command("env CUDA_VISIBLE_DEVICES= " + std::string(kBin) + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_EQ(count_lines_with(r.err, "hpctrain: error:"), 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace hpctrain::testing
