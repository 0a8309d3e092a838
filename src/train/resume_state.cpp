#include "hpctrain/train/resume_state.h"

#include "hpctrain/core/error.h"
#include "checkpoint_parts.h"

namespace hpctrain::train {

ResumedState read_resume_state(const ckpt::CheckpointReader& reader, const ResumeTargets& targets) {
  const ckpt::CheckpointMeta& meta = reader.meta();
  ResumedState resumed;
  resumed.step = meta.step;
  resumed.epoch = meta.epoch;
  resumed.cursor = meta.cursor;
  if (meta.step < 0 || meta.epoch < 0 || meta.cursor < 0) {
    throw CheckpointError(reader.path() + ": negative step, epoch or cursor (step " + std::to_string(meta.step) +
                          ", epoch " + std::to_string(meta.epoch) + ", cursor " + std::to_string(meta.cursor) +
                          "); the file is damaged");
  }
  for (const CheckpointPart& part : checkpoint_parts()) part.load(reader, targets, resumed);
  return resumed;
}

}  // namespace hpctrain::train
