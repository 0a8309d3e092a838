// One function per source format; importers.cpp owns the shared part (checks, temporary directory,
// atomic publish) and dispatches by name. Each fills `manifest` (name, fields, classes,
// normalization, splits) and writes its shards into `temp_dir` with write_split.
// Private to src/data.
#pragma once

#include <cstdint>
#include <string>

#include "hpctrain/data/importers.h"
#include "hpctrain/data/manifest.h"
#include "hpctrain/data/shard_writer.h"

namespace hpctrain::data {

// The most bytes a source's header may state: far above any file, far below int64 overflow, so
// sizes multiplied under it cannot overflow.
inline constexpr std::int64_t kMaxSourceBytes = std::int64_t{1} << 62;

// fashion-mnist, mnist: IDX files, gzipped or not.
void import_idx(const std::string& format, const ImportOptions& options, const std::string& temp_dir,
                Manifest& manifest);
// npy: X.npy + y.npy (+ X_test.npy + y_test.npy).
void import_npy(const ImportOptions& options, const std::string& temp_dir, Manifest& manifest);
// text: a file or directory of text to a byte-level token stream with a train/val split.
void import_text(const ImportOptions& options, const std::string& temp_dir, Manifest& manifest);

}  // namespace hpctrain::data
