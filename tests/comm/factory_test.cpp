#include <gtest/gtest.h>

#include <algorithm>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"

namespace hpctrain::comm {
namespace {

TEST(Factory, MpiIsAlwaysAvailable) {
  const auto backends = available_backends();
  EXPECT_NE(std::find(backends.begin(), backends.end(), "mpi"), backends.end());
  const bool has_nccl = std::find(backends.begin(), backends.end(), "nccl") != backends.end();
  EXPECT_EQ(has_nccl, !nccl_version().empty());
}

TEST(Factory, BackendChoiceIsValidatedBeforeMpiStarts) {
  EXPECT_NO_THROW(validate_backend("auto", false));
  EXPECT_NO_THROW(validate_backend("mpi", false));
  EXPECT_THROW(validate_backend("nccl", false), ConfigError);  // NCCL needs CUDA tensors
  EXPECT_NO_THROW(validate_backend("mpi", true));  // CUDA tensors staged through host memory
  EXPECT_THROW(validate_backend("gloo", false), ConfigError);
}

}  // namespace
}  // namespace hpctrain::comm
