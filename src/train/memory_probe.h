// Measures what an item of a split takes (train/memory_check.h's ItemBytes) by running the model
// on one and on a few items of the real data, with libtorch's allocators reporting every
// allocation and free of this thread (the profiler's memory hook: CPU and CUDA alike). The model
// runs in eval mode, so no running statistic, dropout draw or gradient is touched.
#pragma once

#include <c10/core/Device.h>

#include "hpctrain/data/source.h"
#include "hpctrain/model/model.h"
#include "hpctrain/train/memory_check.h"
#include "hpctrain/train/objective.h"

namespace hpctrain::train {

// Per item: the bytes of a few items less those of one, over the difference in items, so what a
// forward holds whatever the batch (workspaces, the parameters' casts) is not counted per item.
// With `model` null, only what an item takes read and finished (kept and peak_no_grad stay 0). The
// model runs through `objective`, as training runs it.
ItemBytes probe_item_bytes(model::Model* model, const Objective& objective, const data::Source& source,
                           c10::Device device);

}  // namespace hpctrain::train
