// A run directory's TensorBoard event file, as a resumed run reads it (tensorboard/tensorboard_writer.h):
// the input is an event file already in <run.dir>/tensorboard/; the writer reads its records
// (io/tfrecord.h: lengths against the file, CRCs), parses each Event and cuts the file back to
// the events of steps <= 5, then writes its own file. It never refuses: what it cannot read it
// cuts off, and what is left must read back whole.
#include <filesystem>
#include <string>

#include "fuzz_target.h"
#include "hpctrain/core/system.h"
#include "hpctrain/io/tfrecord.h"
#include "hpctrain/tensorboard/tensorboard_writer.h"

namespace hpctrain::fuzz {

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string run = scratch_dir() + "/seed-run";
  hpctrain::sys::remove_tree(run);
  {
    tensorboard::TensorBoardWriter writer(run, 0, "[train]\nmax_steps = 10\n");
    for (int step = 1; step <= 10; ++step) writer.write({{"step", step}, {"loss", 2.5 / step}, {"lr", 0.001}});
    std::filesystem::copy_file(writer.path(), dir + "/ten-steps.tfevents",
                               std::filesystem::copy_options::overwrite_existing);
  }
  hpctrain::sys::remove_tree(run);
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  static const bool quiet = (fuzz::silence_logs(), true);
  (void)quiet;
  const std::string run = fuzz::scratch_dir() + "/run";
  sys::remove_tree(run);
  std::filesystem::create_directories(run);
  const std::string old = run + "/events.out.tfevents.1.host.1";
  fuzz::write_file(old, data, size);
  { const tensorboard::TensorBoardWriter writer(run, 5, "[train]\n"); }
  const io::TfRecordFile cut = io::read_tfrecords(old);
  if (!cut.complete) throw std::logic_error("the cut event file does not read back whole");
  sys::remove_tree(run);
  fuzz::record(fuzz::Outcome::kAccepted);
  return 0;
}
