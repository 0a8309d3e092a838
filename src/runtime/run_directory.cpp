#include "hpctrain/runtime/run_directory.h"

#include <filesystem>
#include <fstream>

#include "hpctrain/core/error.h"

namespace hpctrain::runtime {

void RunDirectory::create() const {
  std::error_code ec;
  std::filesystem::create_directories(root_ + "/logs", ec);
  if (!ec) std::filesystem::create_directories(checkpoints_dir(), ec);
  if (ec) {
    throw Error("cannot create run directory " + root_ + ": " + ec.message() +
                " (check run.dir and permissions)", ExitCode::kUsage);
  }
}

void RunDirectory::write_config(const std::string& resolved_config) const {
  std::ofstream out(config_path());
  out << resolved_config;
  if (!out) throw Error("cannot write " + config_path(), ExitCode::kUsage);
}

}  // namespace hpctrain::runtime
