#include "hpctrain/io/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <tuple>
#include <nlohmann/json.hpp>
#include <utility>

#include "hpctrain/core/system.h"

namespace hpctrain::io {
namespace {

using json = nlohmann::json;

// The reference implementation's limit: a header is names and numbers, never this large.
constexpr std::int64_t kMaxHeaderBytes = 100'000'000;

constexpr std::pair<StDtype, const char*> kDtypeNames[] = {
    {StDtype::kF64, "F64"}, {StDtype::kF32, "F32"}, {StDtype::kF16, "F16"}, {StDtype::kBF16, "BF16"},
    {StDtype::kI64, "I64"}, {StDtype::kI32, "I32"}, {StDtype::kI16, "I16"}, {StDtype::kI8, "I8"},
    {StDtype::kU8, "U8"},   {StDtype::kBool, "BOOL"}};

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  throw CheckpointError(where + ": not a readable safetensors file: " + what);
}

StDtype dtype_named(const std::string& name, const std::string& where, const std::string& tensor) {
  for (const auto& [dtype, text] : kDtypeNames) {
    if (name == text) return dtype;
  }
  refuse(where, "tensor '" + tensor + "' has dtype '" + name +
                    "', which hpctrain does not read (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
}

std::uint64_t read_u64_le(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative integer of the header, or refused.
std::int64_t header_int(const json& value, const std::string& where, const std::string& what) {
  if (!value.is_number_unsigned()) refuse(where, what + " is not a non-negative integer");
  const std::uint64_t v = value.get<std::uint64_t>();
  if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) refuse(where, what + " is too large");
  return static_cast<std::int64_t>(v);
}

StTensorInfo parse_tensor(const std::string& name, const json& entry, std::int64_t data_bytes,
                          const std::string& where) {
  const std::string what = "tensor '" + name + "'";
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets")) {
    refuse(where, what + " lacks dtype, shape or data_offsets");
  }
  if (!entry["dtype"].is_string()) refuse(where, what + ": dtype is not a string");
  StTensorInfo info;
  info.name = name;
  info.dtype = dtype_named(entry["dtype"].get<std::string>(), where, name);
  const json& shape = entry["shape"];
  const json& offsets = entry["data_offsets"];
  if (!shape.is_array()) refuse(where, what + ": shape is not a list");
  if (!offsets.is_array() || offsets.size() != 2) refuse(where, what + ": data_offsets is not [begin, end]");
  std::int64_t bytes = element_size(info.dtype);
  for (const json& dim : shape) {
    const std::int64_t d = header_int(dim, where, what + "'s shape");
    info.shape.push_back(d);
    if (d != 0 && bytes > std::numeric_limits<std::int64_t>::max() / d) refuse(where, what + ": shape too large");
    bytes *= d;
  }
  info.begin = header_int(offsets[0], where, what + "'s begin offset");
  info.end = header_int(offsets[1], where, what + "'s end offset");
  if (info.begin > info.end || info.end > data_bytes) {
    refuse(where, what + " lies at bytes [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                      ") of the data, which holds " + std::to_string(data_bytes) +
                      " bytes (a truncated file, or offsets outside it)");
  }
  if (info.end - info.begin != bytes) {
    refuse(where, what + " of shape and dtype " + name_of(info.dtype) + " needs " + std::to_string(bytes) +
                      " bytes, but its offsets give " + std::to_string(info.end - info.begin));
  }
  return info;
}

void check_no_overlap(std::vector<StTensorInfo>& tensors, const std::string& where) {
  std::sort(tensors.begin(), tensors.end(),
            [](const StTensorInfo& a, const StTensorInfo& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  for (size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].begin < tensors[i - 1].end) {
      refuse(where, "tensors '" + tensors[i - 1].name + "' and '" + tensors[i].name + "' overlap");
    }
  }
}

}  // namespace

const char* name_of(StDtype dtype) {
  for (const auto& [d, text] : kDtypeNames) {
    if (d == dtype) return text;
  }
  return "?";
}

std::int64_t element_size(StDtype dtype) {
  switch (dtype) {
    case StDtype::kF64:
    case StDtype::kI64:
      return 8;
    case StDtype::kF32:
    case StDtype::kI32:
      return 4;
    case StDtype::kF16:
    case StDtype::kBF16:
    case StDtype::kI16:
      return 2;
    default:
      return 1;
  }
}

StHeader parse_safetensors_header(const std::uint8_t* data, std::int64_t size, const std::string& where) {
  if (size < 8) refuse(where, "shorter than the 8-byte header length");
  const std::uint64_t stored_length = read_u64_le(data);
  if (stored_length < 2 || stored_length > static_cast<std::uint64_t>(std::min(kMaxHeaderBytes, size - 8))) {
    refuse(where, "the header length " + std::to_string(stored_length) + " does not fit the file's " +
                      std::to_string(size) + " bytes");
  }
  const auto header_bytes = static_cast<std::int64_t>(stored_length);
  const char* text = reinterpret_cast<const char*>(data + 8);
  if (text[0] != '{') refuse(where, "the header is not a JSON object");
  const json header = json::parse(text, text + header_bytes, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) refuse(where, "the header is not valid JSON");
  StHeader out;
  out.data_offset = 8 + header_bytes;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) refuse(where, "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) refuse(where, "__metadata__ value '" + key + "' is not a string");
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    out.tensors.push_back(parse_tensor(name, entry, size - out.data_offset, where));
  }
  check_no_overlap(out.tensors, where);
  return out;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  MappedFile file = MappedFile::map(path, ExitCode::kCheckpoint);
  StHeader header = parse_safetensors_header(file.data(), file.size(), path);
  return SafetensorsFile(path, std::move(file), std::move(header));
}

const std::uint8_t* SafetensorsFile::bytes(const StTensorInfo& tensor) const {
  return file_.data() + header_.data_offset + tensor.begin;
}

void write_safetensors(const std::string& path, const std::vector<StTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::int64_t offset = 0;
  std::vector<std::int64_t> sizes;
  for (const StTensorOut& t : tensors) {
    std::int64_t bytes = element_size(t.dtype);
    for (const std::int64_t d : t.shape) bytes *= d;
    header[t.name] = {{"dtype", name_of(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the reference writes it
  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  std::FILE* file = std::fopen(temp.c_str(), "wb");
  const auto cannot = [&] {
    if (file != nullptr) std::fclose(file);
    std::remove(temp.c_str());
    throw Error("cannot write " + temp + ": " + std::strerror(errno) + " (check the path and free space)",
                ExitCode::kUsage);
  };
  if (file == nullptr) cannot();
  std::uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
  bool ok = std::fwrite(length, 1, 8, file) == 8 && std::fwrite(text.data(), 1, text.size(), file) == text.size();
  for (size_t i = 0; ok && i < tensors.size(); ++i) {
    ok = std::fwrite(tensors[i].bytes, 1, static_cast<size_t>(sizes[i]), file) == static_cast<size_t>(sizes[i]);
  }
  const bool closed = std::fclose(file) == 0;
  file = nullptr;
  if (!ok || !closed) cannot();
  sys::publish_atomically(temp, path);
}

}  // namespace hpctrain::io
