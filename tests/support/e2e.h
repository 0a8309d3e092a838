// What the end-to-end tests share: the hpctrain executable under test, the source tree (compile
// definitions of the test target), and Fashion-MNIST subsets prepared with the executable.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "process.h"

namespace hpctrain::testing {

inline const std::string kBin = HPCTRAIN_BIN;
inline const std::string kSource = HPCTRAIN_SOURCE_DIR;
inline const std::string kFashionMnist = "/usr/share/datasets/fashion-mnist";  // Debian's dataset-fashion-mnist

// `hpctrain prepare fashion-mnist` into `out`: the first `limit` samples of each split (0: all) in
// `shards` shards.
ProcessResult prepare_fashion(const std::string& out, int limit, int shards = 1);

// A suite's temporary directory, tagged `tag`, with a Fashion-MNIST subset prepared at
// <work>/<name>; a failed prepare fails the test. The suite removes `work` when it ends.
struct FashionSuite {
  std::string work;
  std::string data;
};
FashionSuite make_fashion_suite(const std::string& tag, int limit, int shards, const std::string& name = "fashion");

// The records of a JSON-lines file (metrics.jsonl), in order.
std::vector<nlohmann::json> read_jsonl(const std::string& path);
// The records of JSON-lines text (a command's output), empty lines left out.
std::vector<nlohmann::json> json_lines(const std::string& text);

}  // namespace hpctrain::testing
