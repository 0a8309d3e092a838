// The error hierarchy and the process exit codes (docs/exit-codes.md).
// Library code throws these; only main() catches, prints one line and chooses the exit code.
// Depends on std only.
#pragma once

#include <stdexcept>
#include <string>

namespace hpctrain {

// Exit codes are part of the interface: scripts (slurm/ requeue) branch on them.
enum class ExitCode : int {
  kOk = 0,
  kInternal = 1,
  kUsage = 2,       // bad command line or config
  kData = 3,        // dataset missing, malformed or unreadable
  kCheckpoint = 4,  // checkpoint missing, malformed or mismatched
  kComm = 5,        // MPI/NCCL failure or timeout
  kNonfinite = 6,   // gradients not finite: train.nonfinite=abort, or train.max_skipped exceeded
  kStopped = 75,    // stopped on a signal after a checkpoint; resumable (EX_TEMPFAIL)
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, ExitCode code = ExitCode::kInternal)
      : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// Raised identically on every rank (same files, same flags), so every rank can exit on its own
// without MPI_Abort and only rank 0 needs to print it.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(message, ExitCode::kUsage) {}
};

class DataError : public Error {
 public:
  explicit DataError(const std::string& message) : Error(message, ExitCode::kData) {}
};

class CheckpointError : public Error {
 public:
  explicit CheckpointError(const std::string& message) : Error(message, ExitCode::kCheckpoint) {}
};

class CommError : public Error {
 public:
  explicit CommError(const std::string& message) : Error(message, ExitCode::kComm) {}
};

// Where a check failed: "file.cpp:42".
std::string source_location(const char* file, int line);

}  // namespace hpctrain

// Internal invariant: throws hpctrain::Error (exit code 1) naming the condition and file:line.
#define HT_CHECK(cond, msg)                                                                   \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      throw ::hpctrain::Error(std::string("internal check failed: ") + #cond + ": " + (msg) + \
                              " (" + ::hpctrain::source_location(__FILE__, __LINE__) + ")");  \
    }                                                                                         \
  } while (0)
