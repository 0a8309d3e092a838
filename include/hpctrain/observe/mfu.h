// Model FLOP utilization: the model's arithmetic per second (model/flops.h) against the most the
// devices could do. Pure functions of names and numbers; depends on nothing else.
#pragma once

#include <optional>
#include <string>

#include "hpctrain/config/config.h"

namespace hpctrain::observe {

// One device's peak, and where the figure comes from ("train.peak_tflops", or the GPU and precision).
struct PeakFlops {
  double tflops = 0;
  std::string source;
};

// The dense (no sparsity) bf16/fp16 tensor-core peak of an NVIDIA data-center GPU known by its CUDA
// name ("NVIDIA H100 80GB HBM3" -> 989.4); nullopt for any other name.
std::optional<double> known_gpu_peak_tflops(const std::string& gpu_name);

// What MFU is measured against: `option` (train.peak_tflops) when > 0; else a known GPU's peak
// for `precision` bf16 or fp16, or its TF32 peak (half that) for fp32 with `tf32` (train.tf32);
// else none (full float32 runs on other units, a CPU's peak depends on its cores). `gpu_name` is
// "" on a CPU.
std::optional<PeakFlops> resolve_peak_flops(double option, const std::string& gpu_name,
                                            config::Precision precision, bool tf32);

// Model TFLOP/s of the whole job from its samples per second and the training FLOPs of a sample.
inline double model_tflops(double samples_per_s, double training_flops_per_sample) {
  return samples_per_s * training_flops_per_sample / 1e12;
}

// The fraction of `devices` x the peak that `tflops` is.
inline double mfu(double tflops, int devices, double peak_tflops) { return tflops / (devices * peak_tflops); }

}  // namespace hpctrain::observe
