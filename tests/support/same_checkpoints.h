// For tests that compare two checkpoints: the named groups hold the same tensors, in the same
// order, under the same names, bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

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

}  // namespace hpctrain::testing
