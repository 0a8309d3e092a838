// HDF5's Fletcher-32 checksum (the fletcher32 filter), computed bit for bit as HDF5 computes it but
// several times faster, so a chunk read raw from the file (H5Dread_chunk) can be checked without
// HDF5's filter pipeline. Depends on nothing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hpctrain::io {

// The value HDF5's H5_checksum_fletcher32 returns for these bytes.
std::uint32_t fletcher32(const void* data, size_t bytes);

// Whether `stored` (the 4 little-endian bytes the filter appends to a chunk) matches `computed`:
// HDF5 also accepts the value with each 16-bit half byte-swapped, written by HDF5 1.6.0-1.6.2.
bool fletcher32_matches(std::uint32_t stored, std::uint32_t computed);

}  // namespace hpctrain::io
