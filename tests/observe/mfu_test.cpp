#include "hpctrain/observe/mfu.h"

#include <gtest/gtest.h>

namespace hpctrain::observe {
namespace {

TEST(Mfu, KnownGpusAreFoundByTheirCudaNames) {
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA H100 80GB HBM3"), 989.4);
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA H100 PCIe"), 756.5);
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA H100 NVL"), 835.5);
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA H200"), 989.4);
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA H200 NVL"), 835.5);
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA GH200 480GB"), 989.4);
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA A100-SXM4-80GB"), 312.0);
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA B200"), 2250.0);
  EXPECT_FALSE(known_gpu_peak_tflops("NVIDIA GeForce RTX 4090").has_value());
  EXPECT_FALSE(known_gpu_peak_tflops("").has_value());
}

TEST(Mfu, ThePeakIsTheOptionElseAKnownGpusForThePrecision) {
  const auto set = resolve_peak_flops(50, "", config::Precision::kFp32, false);
  ASSERT_TRUE(set.has_value());
  EXPECT_EQ(set->tflops, 50);
  EXPECT_EQ(set->source, "train.peak_tflops");
  const auto h100 = resolve_peak_flops(0, "NVIDIA H100 80GB HBM3", config::Precision::kBf16, true);
  ASSERT_TRUE(h100.has_value());
  EXPECT_EQ(h100->tflops, 989.4);
  EXPECT_EQ(h100->source, "NVIDIA H100 80GB HBM3, dense bf16");
  EXPECT_TRUE(resolve_peak_flops(0, "NVIDIA A100-SXM4-80GB", config::Precision::kFp16, false).has_value());
  // fp32 on TF32 tensor cores: half the bf16 rate.
  const auto tf32 = resolve_peak_flops(0, "NVIDIA A100-SXM4-80GB", config::Precision::kFp32, true);
  ASSERT_TRUE(tf32.has_value());
  EXPECT_EQ(tf32->tflops, 156.0);
  EXPECT_EQ(tf32->source, "NVIDIA A100-SXM4-80GB, dense tf32");
  // Full float32, a CPU, an unknown GPU: no peak unless given.
  EXPECT_FALSE(resolve_peak_flops(0, "NVIDIA H100 80GB HBM3", config::Precision::kFp32, false).has_value());
  EXPECT_FALSE(resolve_peak_flops(0, "", config::Precision::kBf16, true).has_value());
  EXPECT_FALSE(resolve_peak_flops(0, "", config::Precision::kFp32, true).has_value());
  EXPECT_FALSE(resolve_peak_flops(0, "NVIDIA GeForce RTX 4090", config::Precision::kBf16, true).has_value());
}

TEST(Mfu, UtilizationIsTheJobsRateOverAllDevicesPeaks) {
  // 1,000 samples/s of 6 GFLOP each: 6 TFLOP/s; on 4 devices of 10 TFLOP/s, 15 %.
  EXPECT_DOUBLE_EQ(model_tflops(1000, 6e9), 6.0);
  EXPECT_DOUBLE_EQ(mfu(6.0, 4, 10.0), 0.15);
}

}  // namespace
}  // namespace hpctrain::observe
