// GPU work captured once as a CUDA graph and replayed: one launch for the hundreds of kernels of a
// forward and backward, so the GPU no longer waits for the host to launch them one by one. What
// the work reads and writes must stay where it was at capture (the same input tensors, filled
// before each replay; the same gradient tensors), and the work must do the same thing every time:
// no host synchronization, no shapes that change. Built only against a libtorch with CUDA (and
// without HPCTRAIN_WITH_CUDA_GRAPHS=OFF); elsewhere available() is false and capturing throws.
// Depends on torch (through the source only).
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>

namespace hpctrain::train {

class CapturedWork {
 public:
  // True when this build can capture CUDA graphs.
  static bool available();

  // Runs `work` `warmup` times on a stream of its own (libraries make their handles and
  // workspaces there), then captures one more run of it on `device` without executing it.
  // Allocations made during capture come from a pool the graph keeps. Throws ConfigError when
  // this build cannot capture, and what CUDA says when the work cannot be captured.
  CapturedWork(c10::Device device, const std::function<void()>& work, int warmup = 3);
  ~CapturedWork();
  CapturedWork(const CapturedWork&) = delete;
  CapturedWork& operator=(const CapturedWork&) = delete;

  // Runs the captured work on the current stream.
  void replay();

 private:
  struct Graph;
  std::unique_ptr<Graph> graph_;
};

}  // namespace hpctrain::train
