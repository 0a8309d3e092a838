// HT_MPI_CHECK: turns an MPI return code into a CommError carrying MPI's message, the call,
// file:line, rank and host. Private to src/comm (the only code that includes mpi.h).
#pragma once

#include <mpi.h>

#include <string>

#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"

namespace hpctrain::comm {

inline std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

}  // namespace hpctrain::comm

#define HT_MPI_CHECK(call)                                                                      \
  do {                                                                                          \
    const int ht_mpi_rc = (call);                                                               \
    if (ht_mpi_rc != MPI_SUCCESS) {                                                             \
      throw ::hpctrain::CommError(std::string(#call) + " failed: " +                            \
                                  ::hpctrain::comm::mpi_error_text(ht_mpi_rc) + " (" +          \
                                  ::hpctrain::source_location(__FILE__, __LINE__) + " " +       \
                                  ::hpctrain::log::where() + ")");                              \
    }                                                                                           \
  } while (0)
