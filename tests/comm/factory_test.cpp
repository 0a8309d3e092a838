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
  EXPECT_NO_THROW(validate_backend(config::Backend::kAuto, false));
  EXPECT_NO_THROW(validate_backend(config::Backend::kMpi, false));
  EXPECT_THROW(validate_backend(config::Backend::kNccl, false), ConfigError);  // NCCL needs CUDA tensors
  EXPECT_NO_THROW(validate_backend(config::Backend::kMpi, true));  // CUDA tensors staged through host memory
}

}  // namespace
}  // namespace hpctrain::comm
