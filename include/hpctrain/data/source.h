// What training and evaluation read, whatever the dataset holds: a sample split (images or arrays
// with labels) or a token stream (windows of tokens, for a language model). A Source plans which
// positions each rank's micro-batches take (its Sampler, from the global cursor), reads a
// micro-batch as stored with its sample weights and augmented (on the loader's threads), and
// finishes it where the model runs: copied to the device and, for samples, normalized there, so a
// uint8 image crosses to a GPU as uint8 and the arithmetic is the GPU's. Evaluation reads items end
// to end. Depends on config, data (Split, TokenStream, the samplers, augment) and ATen.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

#include "hpctrain/config/config.h"
#include "hpctrain/data/augment.h"
#include "hpctrain/data/sampler.h"
#include "hpctrain/data/split.h"
#include "hpctrain/data/token_stream.h"

namespace hpctrain::data {

struct SourceOptions {
  std::string split;                   // the split's name, for messages
  std::int64_t batch_size = 1;         // per rank and micro-batch (train.batch_size)
  std::uint64_t seed = 0;              // train.seed: the epochs' order and the augmentation draws
  bool shuffle = true;                 // train.shuffle
  bool drop_last = false;              // train.drop_last
  std::int64_t shuffle_window_mb = 0;  // data.shuffle_window_mb
  std::int64_t cache_mb = 0;           // data.cache_mb, for messages
  config::DataIo io = config::DataIo::kMmap;
  AugmentOptions augment;  // data.random_crop, data.random_flip: samples only
  bool pinned = false;     // batches in page-locked memory, for a copy to a GPU that overlaps compute
};

// The options of `config` for reading split `split`; `pinned` when the run computes on a GPU.
SourceOptions source_options(const config::Config& config, const std::string& split, bool pinned);

class Source {
 public:
  virtual ~Source() = default;

  // Which positions the micro-batches of rank `rank` of `world_size` take, epoch by epoch; logs
  // how the split will be read. Throws ConfigError or DataError when no step fits.
  virtual std::unique_ptr<Sampler> sampler(int world_size, int rank) const = 0;
  // What an epoch goes over, for the log: "6000 samples", "a stream of ... tokens (...)".
  virtual std::string describe() const = 0;
  // Safe from several threads at once: micro-batch `step` of `epoch` as stored, augmented, with
  // its weights and real-sample counts.
  virtual Batch read(std::int64_t epoch, const SamplerStep& step) const = 0;
  // `batch` as the model takes it, on `device`: input (normalized samples, or token ids), target
  // and weights there (asynchronous copies from pinned memory).
  virtual Batch finish(const Batch& batch, c10::Device device) const = 0;

  // The split as items end to end, as evaluation scores it: a split's samples, or a stream's
  // windows laid end to end (each of their tokens predicted once). read_items: items [first,
  // first + count).
  virtual std::int64_t items() const = 0;
  virtual Batch read_items(std::int64_t first, std::int64_t count) const = 0;
  // Tokens an item predicts: a stream's window length; 0 for a sample with a label.
  virtual std::int64_t tokens_per_item() const = 0;
  bool language_model() const { return tokens_per_item() > 0; }

  // The memory its cache of the split (data.cache_mb's budget) will still take as it reads: 0
  // for the page cache's mapped files or a stream held whole.
  virtual std::int64_t cache_bytes_to_come() const = 0;

  // With data.io=mpio, collective over MPI_COMM_WORLD, before training: a split held in memory is
  // read once by all ranks together; a larger split or a token stream only says why it is not.
  virtual void read_collectively(int world_size) const = 0;

 protected:
  // `batch` with `step`'s weights and real-sample counts.
  static Batch with_weights(Batch batch, const SamplerStep& step);
  // `batch` with `input` (already on `device`) and its target and weights copied there.
  static Batch on_device(const Batch& batch, at::Tensor input, c10::Device device);
};

std::shared_ptr<const Source> sample_source(Split split, SourceOptions options);
std::shared_ptr<const Source> token_source(TokenStream stream, SourceOptions options);

}  // namespace hpctrain::data
