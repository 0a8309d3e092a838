// Runs a fuzz target over files without libFuzzer: the seed corpus and the regression inputs in
// CTest (every build), or one crashing input under a debugger.
//   fuzz_replay_<target> [--valid] PATH... [--any PATH...]
//       each file, and each file under each directory; those after --valid must be accepted
//       (read without an error: a seed), those after --any may also be refused
//   fuzz_replay_<target> --write-seeds DIR   the target's seed inputs
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_target.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 2 && args[0] == "--write-seeds") {
    hpctrain::fuzz::write_seeds(args[1]);
    return 0;
  }
  std::vector<std::pair<std::string, bool>> inputs;  // path, must be accepted
  bool valid = false;
  for (const std::string& arg : args) {
    if (arg == "--valid" || arg == "--any") {
      valid = arg == "--valid";
      continue;
    }
    std::vector<std::string> files;
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path().string());
      }
    } else if (fs::is_regular_file(arg)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", arg.c_str());
      return 2;
    }
    std::sort(files.begin(), files.end());
    for (const std::string& file : files) inputs.emplace_back(file, valid);
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s [--valid] PATH... [--any PATH...] | --write-seeds DIR\n", argv[0]);
    return 2;
  }
  for (const auto& [input, must_accept] : inputs) {
    const std::string bytes = hpctrain::fuzz::read_file(input);
    std::fprintf(stderr, "%s (%zu bytes)\n", input.c_str(), bytes.size());
    try {
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "FAILED on %s: uncaught %s\n", input.c_str(), e.what());
      return 1;
    }
    if (must_accept && hpctrain::fuzz::last_outcome() != hpctrain::fuzz::Outcome::kAccepted) {
      std::fprintf(stderr, "FAILED on %s: a valid input was refused\n", input.c_str());
      return 1;
    }
  }
  std::printf("%zu inputs replayed\n", inputs.size());
  return 0;
}
