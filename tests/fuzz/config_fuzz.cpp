// The config reader: an INI file as `--config` reads it, with every table option checked. A
// complete configuration it accepts must survive the round trip that the run directory's
// config.ini and the checkpoint rely on: to_ini() read back gives the same text, and comparing it
// with itself finds no difference.
#include <filesystem>
#include <string>

#include "fuzz_target.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"

namespace hpctrain::fuzz {

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (const auto& entry : std::filesystem::directory_iterator(HPCTRAIN_SOURCE_DIR "/configs")) {
    if (entry.path().extension() == ".ini") {
      std::filesystem::copy_file(entry.path(), std::filesystem::path(dir) / entry.path().filename(),
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  static const std::string path = fuzz::scratch_dir() + "/config.ini";
  fuzz::silence_logs();
  fuzz::write_file(path, data, size);
  config::Config parsed;
  try {
    (void)config::resolve(path, {}, /*require_complete=*/false);  // every value checked...
    parsed = config::resolve(path, {}, /*require_complete=*/true);  // ...and nothing required missing
  } catch (const Error& e) {
    if (e.code() != ExitCode::kUsage) throw;
    fuzz::record(fuzz::Outcome::kRefused);  // with a message: what a user sees
    return 0;
  }
  const std::string ini = config::to_ini(parsed);
  fuzz::write_file(path, ini);
  const std::string again = config::to_ini(config::resolve(path, {}, /*require_complete=*/false));
  if (again != ini) throw std::logic_error("to_ini does not round-trip:\n" + ini + "\n---\n" + again);
  if (!config::ini_differences(ini, again).empty()) throw std::logic_error("ini_differences of equal texts");
  fuzz::record(fuzz::Outcome::kAccepted);
  return 0;
}
