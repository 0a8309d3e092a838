// The layout of a run directory: config.ini, logs/rank-<r>.log, metrics.jsonl, checkpoints/,
// tensorboard/, trace/rank-<r>.json, profile/rank-<r>.tsv, flight/rank-<r>.json.
// Rank 0 creates it; every rank then knows where its files go. Depends on core only.
#pragma once

#include <string>

namespace hpctrain::runtime {

class RunDirectory {
 public:
  explicit RunDirectory(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  std::string config_path() const { return root_ + "/config.ini"; }
  std::string metrics_path() const { return root_ + "/metrics.jsonl"; }
  std::string tensorboard_dir() const { return root_ + "/tensorboard"; }
  std::string checkpoints_dir() const { return root_ + "/checkpoints"; }
  std::string flight_dir() const { return root_ + "/flight"; }
  std::string trace_path(int world_rank) const {
    return root_ + "/trace/rank-" + std::to_string(world_rank) + ".json";
  }
  std::string profile_path(int world_rank) const {
    return root_ + "/profile/rank-" + std::to_string(world_rank) + ".tsv";
  }
  std::string log_path(int world_rank) const {
    return root_ + "/logs/rank-" + std::to_string(world_rank) + ".log";
  }

  // Creates the directories (rank 0 only). Throws Error naming the path when it cannot.
  void create() const;
  // Writes config.ini (rank 0 only), once the run is known to go ahead: a resume refused for a
  // changed config leaves the directory's config.ini as it was.
  void write_config(const std::string& resolved_config) const;

 private:
  std::string root_;
};

}  // namespace hpctrain::runtime
