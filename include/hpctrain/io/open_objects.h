// How many HDF5 objects (files, groups, datasets, types, spaces, property lists) this process
// holds open: 0 between reads, since every io call closes what it opens. The fuzz targets check
// it after each input, as a handle kept open keeps its memory reachable and so hides from
// LeakSanitizer. Depends on nothing; only io/*.cpp includes hdf5.h.
#pragma once

#include <cstdint>

namespace hpctrain::io {

std::int64_t open_hdf5_objects();

}  // namespace hpctrain::io
