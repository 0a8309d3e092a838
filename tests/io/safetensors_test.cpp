// io::parse_safetensors_header, SafetensorsFile and write_safetensors: a round trip, and one line
// (exit 4) for each way a file can be wrong.
#include "hpctrain/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace hpctrain::io {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("hpctrain_st_" + std::to_string(::getpid()) + "_" + name)).string();
}

// A file of `header` (JSON) and `data` bytes, with the header length `length` (default: right).
std::string file_bytes(const std::string& header, const std::string& data, std::uint64_t length = 0) {
  if (length == 0) length = header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(length >> (8 * i));
  return out + header + data;
}

std::string refusal(const std::string& bytes) {
  try {
    parse_safetensors_header(reinterpret_cast<const std::uint8_t*>(bytes.data()), static_cast<std::int64_t>(bytes.size()),
                             "w.safetensors");
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.code(), ExitCode::kCheckpoint);
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  return "accepted";
}

TEST(Safetensors, WrittenTensorsReadBackWithTheirDtypesShapesAndMetadata) {
  const std::string path = temp_path("round.safetensors");
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const std::uint16_t b[3] = {0x3c00, 0x4000, 0x4200};  // 1, 2, 3 in float16
  const std::int64_t c[1] = {-7};
  write_safetensors(path,
                    {{"a.weight", StDtype::kF32, {2, 3}, a}, {"b", StDtype::kF16, {3}, b}, {"c", StDtype::kI64, {}, c}},
                    {{"format", "pt"}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.header().metadata.at("format"), "pt");
  EXPECT_EQ(file.header().data_offset % 8, 0);
  ASSERT_EQ(file.header().tensors.size(), 3u);
  const StTensorInfo& first = file.header().tensors[0];
  EXPECT_EQ(first.name, "a.weight");
  EXPECT_EQ(first.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(file.bytes(first), a, sizeof a), 0);
  EXPECT_EQ(file.header().tensors[1].dtype, StDtype::kF16);
  EXPECT_EQ(std::memcmp(file.bytes(file.header().tensors[1]), b, sizeof b), 0);
  EXPECT_TRUE(file.header().tensors[2].shape.empty());
  EXPECT_EQ(std::memcmp(file.bytes(file.header().tensors[2]), c, sizeof c), 0);
  fs::remove(path);
}

TEST(Safetensors, EachDamageIsOneLine) {
  const std::string good = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(refusal(file_bytes(good, std::string(8, 'x'))), "accepted");
  EXPECT_NE(refusal("abc").find("shorter than the 8-byte header length"), std::string::npos);
  EXPECT_NE(refusal(file_bytes(good, std::string(8, 'x'), std::uint64_t{1} << 63)).find("header length 9223372036854775808"),
            std::string::npos);
  EXPECT_NE(refusal(file_bytes(good, std::string(4, 'x'))).find("truncated"), std::string::npos);
  EXPECT_NE(refusal(file_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'x')))
                .find("needs 12 bytes"),
            std::string::npos);
  EXPECT_NE(refusal(file_bytes(R"({"w":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", std::string(8, 'x')))
                .find("dtype 'F8_E4M3'"),
            std::string::npos);
  EXPECT_NE(refusal(file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,99]}})", std::string(8, 'x')))
                .find("offsets outside"),
            std::string::npos);
  EXPECT_NE(refusal(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                               std::string(8, 'x')))
                .find("overlap"),
            std::string::npos);
  EXPECT_NE(refusal(file_bytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, 'x')))
                .find("not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(refusal(file_bytes(R"({"w": [1, 2)", "")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(refusal(file_bytes(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})",
                               std::string(8, 'x')))
                .find("shape too large"),
            std::string::npos);
}

TEST(Safetensors, AFileThatCannotBeOpenedIsNamed) {
  try {
    SafetensorsFile::open(temp_path("absent.safetensors"));
    FAIL() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kCheckpoint);
    EXPECT_NE(std::string(e.what()).find("absent.safetensors"), std::string::npos);
  }
}

}  // namespace
}  // namespace hpctrain::io
