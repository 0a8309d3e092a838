// The layout of a run directory: config.ini, logs/rank-<r>.log, metrics.jsonl, checkpoints/.
// Rank 0 creates it; every rank then knows where its files go. Depends on core only.
#pragma once

#include <string>

namespace hpctrain::train {

class RunDirectory {
 public:
  explicit RunDirectory(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  std::string config_path() const { return root_ + "/config.ini"; }
  std::string metrics_path() const { return root_ + "/metrics.jsonl"; }
  std::string checkpoints_dir() const { return root_ + "/checkpoints"; }
  std::string log_path(int world_rank) const {
    return root_ + "/logs/rank-" + std::to_string(world_rank) + ".log";
  }

  // Creates the directories and writes the resolved config (rank 0 only). Throws Error naming the
  // path when the directory cannot be created or written.
  void create(const std::string& resolved_config) const;

 private:
  std::string root_;
};

}  // namespace hpctrain::train
