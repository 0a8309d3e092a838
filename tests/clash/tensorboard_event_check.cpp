// Writes a TensorBoard event file of two records through the writer training uses, for
// tests/clash/tensorboard_clash_test.sh: it links the TensorBoard module alone.
//   tensorboard_event_check DIR
#include <cstdio>
#include <exception>

#include "hpctrain/tensorboard/tensorboard_writer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tensorboard_event_check DIR\n");
    return 2;
  }
  try {
    hpctrain::tensorboard::TensorBoardWriter writer(argv[1], 0, "[train]\nmax_steps = 2\n");
    writer.write({{"step", 1}, {"loss", 2.5}});
    writer.write({{"step", 2}, {"loss", 1.25}, {"lr", 0.5}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensorboard_event_check: %s\n", e.what());
    return 1;
  }
  return 0;
}
