#include "e2e.h"

#include <gtest/gtest.h>

#include <sstream>

namespace hpctrain::testing {

ProcessResult prepare_fashion(const std::string& out, int limit, int shards) {
  std::string command = kBin + " prepare fashion-mnist --source " + kFashionMnist + " --out " + out;
  if (limit > 0) command += " --limit " + std::to_string(limit);
  if (shards > 1) command += " --shards " + std::to_string(shards);
  return run_command(command);
}

FashionSuite make_fashion_suite(const std::string& tag, int limit, int shards, const std::string& name) {
  FashionSuite suite{make_temp_dir(tag), ""};
  suite.data = suite.work + "/" + name;
  const ProcessResult prepared = prepare_fashion(suite.data, limit, shards);
  if (prepared.exit_code != 0) ADD_FAILURE() << "prepare fashion-mnist failed: " << prepared.err;
  return suite;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

}  // namespace hpctrain::testing
