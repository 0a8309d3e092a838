// For tests that compare two checkpoints: the named groups hold the same tensors, in the same
// order, under the same names, bit for bit; or how far apart they are.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <string>
#include <vector>

#include "hpctrain/ckpt/checkpoint.h"

namespace hpctrain::testing {

inline void expect_same_tensors(const std::string& expected_path, const std::string& actual_path,
                                const std::vector<std::string>& groups) {
  for (const std::string& group : groups) {
    const ckpt::NamedTensors expected = ckpt::CheckpointReader(expected_path).read_group(group);
    const ckpt::NamedTensors actual = ckpt::CheckpointReader(actual_path).read_group(group);
    ASSERT_EQ(expected.size(), actual.size()) << group;
    ASSERT_FALSE(expected.empty()) << group << " is empty in " << expected_path;
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_EQ(expected[i].first, actual[i].first) << group;
      EXPECT_TRUE(at::equal(expected[i].second, actual[i].second))
          << group << "/" << expected[i].first << ": " << expected_path << " vs " << actual_path;
    }
  }
}

// ||x - y|| / ||x|| over the floating-point tensors of `group` of the two checkpoints, those whose
// names contain `leave_out` (when given) left out.
inline double relative_difference(const std::string& a, const std::string& b, const std::string& group,
                                  const std::string& leave_out = "") {
  const ckpt::NamedTensors x = ckpt::CheckpointReader(a).read_group(group);
  const ckpt::NamedTensors y = ckpt::CheckpointReader(b).read_group(group);
  EXPECT_EQ(x.size(), y.size());
  double difference = 0;
  double norm = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (!x[i].second.is_floating_point()) continue;
    if (!leave_out.empty() && x[i].first.find(leave_out) != std::string::npos) continue;
    difference += (x[i].second - y[i].second).to(at::kDouble).pow(2).sum().item<double>();
    norm += x[i].second.to(at::kDouble).pow(2).sum().item<double>();
  }
  return std::sqrt(difference / norm);
}

}  // namespace hpctrain::testing
