// Runs a shell command for the end-to-end and CLI tests and captures what it printed.
#pragma once

#include <string>

namespace hpctrain::testing {

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `command` through /bin/sh; stdout and stderr captured separately.
ProcessResult run_command(const std::string& command);

// `mpirun -np N` with the flags these tests need (root, oversubscription), ready for a program.
std::string mpirun(int ranks);

// Lines of `text` containing `needle`.
int count_lines_with(const std::string& text, const std::string& needle);

// A fresh empty directory under the system temp dir, removed by the caller.
std::string make_temp_dir(const std::string& tag);

std::string read_file(const std::string& path);

}  // namespace hpctrain::testing
