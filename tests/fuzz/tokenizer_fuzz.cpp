// GPT-2's tokenizer files, as `prepare text --tokenizer gpt2` and generation read them. The input's
// first byte picks the file of a small valid pair that the rest replaces (even: encoder.json, odd:
// vocab.bpe); the pair is loaded and, if accepted, must encode a text with every kind of
// character and decode it back exactly.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "fuzz_target.h"
#include "hpctrain/core/error.h"
#include "hpctrain/data/gpt2_tokenizer.h"

namespace hpctrain::fuzz {
namespace {

const char* const kText = "Hello, it's  naïve 日本 😀 123\n\n x\t";

// GPT-2's alphabet for one byte, as UTF-8 (gpt2_tokenizer.cpp's table, written out again).
std::string letter(int byte) {
  int code = byte;
  if (!((byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF))) {
    code = 256;
    for (int b = 0; b < byte; ++b) {
      if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) ++code;
    }
  }
  std::string out;
  if (code < 0x80) return std::string(1, static_cast<char>(code));
  out += static_cast<char>(0xC0 | (code >> 6));
  out += static_cast<char>(0x80 | (code & 0x3F));
  return out;
}

// Every byte a token, and three merges.
std::string seed_encoder() {
  nlohmann::json j;
  for (int b = 0; b < 256; ++b) j[letter(b)] = b;
  j["He"] = 256;
  j["ll"] = 257;
  j[letter(' ') + "x"] = 258;
  return j.dump();
}

std::string seed_merges() { return "#version: 0.2\nH e\nl l\n" + letter(' ') + " x\n"; }

}  // namespace

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  write_file(dir + "/encoder.json", std::string(1, '\0') + seed_encoder());
  write_file(dir + "/vocab.bpe", std::string(1, '\1') + seed_merges());
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  if (size == 0) return 0;
  static const std::string encoder = fuzz::scratch_dir() + "/encoder.json";
  static const std::string merges = fuzz::scratch_dir() + "/vocab.bpe";
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  fuzz::write_file(encoder, data[0] % 2 == 0 ? rest : fuzz::seed_encoder());
  fuzz::write_file(merges, data[0] % 2 == 1 ? rest : fuzz::seed_merges());
  try {
    const data::Gpt2Tokenizer tokenizer = data::Gpt2Tokenizer::load(encoder, merges);
    if (tokenizer.decode(tokenizer.encode(fuzz::kText)) != fuzz::kText) {
      throw std::logic_error("an accepted tokenizer does not decode what it encoded");
    }
  } catch (const Error& e) {
    if (e.code() != ExitCode::kData) throw;
    fuzz::record(fuzz::Outcome::kRefused);
    return 0;
  }
  fuzz::record(fuzz::Outcome::kAccepted);
  return 0;
}
