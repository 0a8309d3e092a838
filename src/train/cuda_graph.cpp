#include "hpctrain/train/cuda_graph.h"

#include "hpctrain/core/error.h"

#if HT_WITH_CUDA_GRAPHS
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#endif

namespace hpctrain::train {

#if HT_WITH_CUDA_GRAPHS

struct CapturedWork::Graph {
  at::cuda::CUDAGraph graph;
};

namespace {

class AutocastCacheOff {
 public:
  AutocastCacheOff() : was_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(was_); }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool was_;
};

}  // namespace

bool CapturedWork::available() { return true; }

CapturedWork::CapturedWork(c10::Device device, const std::function<void()>& work, int warmup)
    : graph_(std::make_unique<Graph>()) {
  if (!device.is_cuda()) throw ConfigError("CUDA graphs capture GPU work; the device is " + device.str());
  const c10::cuda::CUDAGuard on_device(device.index());
  const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device.index());
  // Capture needs a stream other than the default one; it starts after what the caller queued.
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  at::cuda::CUDAEvent queued;
  queued.record(caller);
  queued.block(side);
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    for (int i = 0; i < warmup; ++i) work();
    torch::cuda::synchronize(device.index());
    // Autocast's cache of cast weights would outlive the capture (PyTorch's rule for graphs).
    const AutocastCacheOff no_cache;
    // Thread-local: the loader's threads may allocate pinned memory meanwhile, which a global
    // capture would forbid; the autograd engine's kernels land on the captured stream anyway.
    graph_->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      work();
    } catch (...) {
      try {
        graph_->graph.capture_end();  // leaves the stream out of capture mode
      } catch (...) {
      }
      throw;
    }
    graph_->graph.capture_end();
  }
  at::cuda::CUDAEvent captured;
  captured.record(side);
  captured.block(caller);
}

CapturedWork::~CapturedWork() = default;

void CapturedWork::replay() { graph_->graph.replay(); }

#else

struct CapturedWork::Graph {};

bool CapturedWork::available() { return false; }

CapturedWork::CapturedWork(c10::Device, const std::function<void()>&, int) {
  throw ConfigError("CUDA graphs need hpctrain built against a libtorch with CUDA and the CUDA toolkit "
                    "found (and without -DHPCTRAIN_WITH_CUDA_GRAPHS=OFF); this build has none");
}

CapturedWork::~CapturedWork() = default;

void CapturedWork::replay() {}

#endif

}  // namespace hpctrain::train
