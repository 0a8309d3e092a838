// UTF-8 read and written one code point at a time, and the byte-level alphabet of GPT-2's BPE
// (each byte a printable character) that GPT-2's files and tokenizer.json's ByteLevel share.
// Internal to data.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace hpctrain::data {

// Decodes one code point at `i` (advanced past it); a bad sequence reads as U+FFFD, one byte.
inline char32_t next_code_point(std::string_view s, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<std::uint8_t>(s[k]); };
  const std::uint8_t b = byte(i);
  int length = 0;
  char32_t c = 0;
  if (b < 0x80) {
    ++i;
    return b;
  } else if ((b & 0xE0) == 0xC0) {
    length = 2;
    c = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    length = 3;
    c = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    length = 4;
    c = b & 0x07;
  } else {
    ++i;
    return 0xFFFD;
  }
  if (i + static_cast<size_t>(length) > s.size()) {
    ++i;
    return 0xFFFD;
  }
  for (int k = 1; k < length; ++k) {
    if ((byte(i + static_cast<size_t>(k)) & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    c = (c << 6) | (byte(i + static_cast<size_t>(k)) & 0x3F);
  }
  static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kSmallest[length] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {  // overlong, too large, surrogate
    ++i;
    return 0xFFFD;
  }
  i += static_cast<size_t>(length);
  return c;
}

inline void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// GPT-2's alphabet: every byte as a printable character (bytes_to_unicode in its encoder).
inline const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// The byte a character of the alphabet stands for; -1 for a character outside it.
inline int byte_of_char(char32_t c) {
  static const std::array<std::int16_t, 512> table = [] {
    std::array<std::int16_t, 512> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_char()[static_cast<size_t>(b)]] = static_cast<std::int16_t>(b);
    return t;
  }();
  return c < table.size() ? table[c] : -1;
}

// `text` with each bad UTF-8 sequence replaced by U+FFFD, as next_code_point reads it.
inline std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) append_utf8(next_code_point(text, i), out);
  return out;
}

}  // namespace hpctrain::data
