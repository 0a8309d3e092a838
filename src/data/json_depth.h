// How deeply a JSON document nests, counted without recursion, so a reader can refuse a file that
// would take its recursive walk (or nlohmann's) too deep. Internal to data.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace hpctrain::data {

// Works for nlohmann::json and nlohmann::ordered_json; a scalar is depth 1.
template <class Json>
size_t nesting_depth(const Json& root) {
  size_t deepest = 0;
  std::vector<std::pair<const Json*, size_t>> todo{{&root, 1}};
  while (!todo.empty()) {
    const auto [node, depth] = todo.back();
    todo.pop_back();
    deepest = std::max(deepest, depth);
    if (node->is_structured()) {
      for (const Json& child : *node) todo.emplace_back(&child, depth + 1);
    }
  }
  return deepest;
}

}  // namespace hpctrain::data
