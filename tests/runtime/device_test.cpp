#include "hpctrain/runtime/device.h"

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "config_error.h"
#include "hpctrain/core/error.h"

namespace hpctrain::runtime {
namespace {

using testing::config_error;

TEST(Device, AutoUsesCudaOnlyWhenAGpuIsVisible) {
  EXPECT_FALSE(resolve_use_cuda(config::DeviceKind::kAuto, 0));
  EXPECT_TRUE(resolve_use_cuda(config::DeviceKind::kAuto, 1));
  EXPECT_TRUE(resolve_use_cuda(config::DeviceKind::kAuto, 8));
}

TEST(Device, CpuIsAlwaysAvailable) {
  EXPECT_FALSE(resolve_use_cuda(config::DeviceKind::kCpu, 0));
  EXPECT_FALSE(resolve_use_cuda(config::DeviceKind::kCpu, 4));
}

TEST(Device, CudaWithoutAVisibleGpuSaysWhyAndWhatToDo) {
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  const std::string message = config_error([] { resolve_use_cuda(config::DeviceKind::kCuda, 0); });
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_NE(message.find("dist.device=cuda"), std::string::npos) << message;
  EXPECT_NE(message.find("CUDA_VISIBLE_DEVICES=''"), std::string::npos) << message;
  EXPECT_NE(message.find("use dist.device=cpu"), std::string::npos) << message;
  EXPECT_TRUE(resolve_use_cuda(config::DeviceKind::kCuda, 1));
}

TEST(Device, EachLocalRankGetsItsOwnGpu) {
  for (int local = 0; local < 4; ++local) EXPECT_EQ(gpu_for_local_rank(local, 4, 4, false), local);
  EXPECT_EQ(gpu_for_local_rank(1, 2, 8, false), 1);  // fewer ranks than GPUs: the first ones
}

TEST(Device, MoreRanksThanGpusIsAnErrorUnlessShared) {
  const std::string message = config_error([] { gpu_for_local_rank(0, 3, 2, false); });
  EXPECT_NE(message.find("3 ranks on this node but 2 visible GPU(s)"), std::string::npos) << message;
  EXPECT_NE(message.find("dist.allow_shared_gpu=true"), std::string::npos) << message;
  EXPECT_EQ(gpu_for_local_rank(0, 3, 2, true), 0);
  EXPECT_EQ(gpu_for_local_rank(1, 3, 2, true), 1);
  EXPECT_EQ(gpu_for_local_rank(2, 3, 2, true), 0);
}

TEST(Device, ARankThatSeesOneGpuTakesIt) {
  // srun --gpus-per-task=1: each of 4 ranks on a node sees its own GPU as device 0.
  for (int local = 0; local < 4; ++local) EXPECT_EQ(gpu_for_local_rank(local, 4, 1, false), 0);
}

TEST(Device, ComputeDeviceNamesTheGpu) {
  EXPECT_EQ(compute_device(false, 3).str(), "cpu");
  EXPECT_EQ(compute_device(true, 3).str(), "cuda:3");
}

TEST(Device, ThisCpuBuildRunsOnTheCpuUnderAuto) {
  // CI machines have no GPU; a machine with one exercises the other branch in gpu-verify.sh.
  if (visible_gpus() > 0) GTEST_SKIP() << "a GPU is visible";
  EXPECT_FALSE(resolve_use_cuda(config::DeviceKind::kAuto, visible_gpus()));
  comm::Topology topology;
  EXPECT_EQ(device_for_rank(false, topology, false).str(), "cpu");
}

TEST(Device, CudaMathSwitchesReachLibtorch) {
  const at::Context& context = at::globalContext();
  set_cuda_math(true, true);
  EXPECT_TRUE(context.allowTF32CuBLAS());
  EXPECT_TRUE(context.allowTF32CuDNN());
  EXPECT_TRUE(context.benchmarkCuDNN());
  set_cuda_math(false, false);
  EXPECT_FALSE(context.allowTF32CuBLAS());
  EXPECT_FALSE(context.allowTF32CuDNN());
  EXPECT_FALSE(context.benchmarkCuDNN());
}

}  // namespace
}  // namespace hpctrain::runtime
