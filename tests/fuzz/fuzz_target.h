// What the fuzz targets share. Each target (config_fuzz.cpp, ...) defines libFuzzer's entry point,
// LLVMFuzzerTestOneInput, and write_seeds, which writes the valid inputs its seed corpus starts
// from. A target builds two ways (tests/CMakeLists.txt): with clang's libFuzzer as
// fuzz_<target> (the `asan` preset, jobs/fuzz.sh), and with replay_main.cpp as
// fuzz_replay_<target>, which every build has and CTest runs over the corpus and the regression
// inputs, so an input that once crashed stays fixed.
// A target accepts exactly the errors hpctrain reports to users for that input: an hpctrain::Error
// with the input's exit code (2 for a config, 3 for a dataset, 4 for a checkpoint). An internal
// error (exit code 1), any other exception, a crash or a sanitizer report is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace hpctrain::fuzz {

// Writes the target's seed inputs into `dir` (created), one file each.
void write_seeds(const std::string& dir);

// A directory of this process's own (under TMPDIR, /dev/shm when it exists), made on first use
// and removed at exit.
const std::string& scratch_dir();

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size);
void write_file(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);

// Quiet logging (warnings about malformed input are expected by the thousand).
void silence_logs();

// What the last input came to, recorded by the target: read without an error, or refused with
// the input's user-facing error. The replay checks that every seed is accepted.
enum class Outcome { kAccepted, kRefused };
void record(Outcome outcome);
Outcome last_outcome();

// Throws std::logic_error when HDF5 objects are left open after an input (io/open_objects.h).
void expect_no_open_hdf5_objects();

}  // namespace hpctrain::fuzz
