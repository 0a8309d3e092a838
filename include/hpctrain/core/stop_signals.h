// Stop requests from a scheduler or a user: signal handlers that only record the signal, read by
// the training loop at step boundaries (where the ranks agree on it, checkpoint and exit 75).
// A second signal during the checkpoint only records again, so it cannot interrupt the write.
// Depends on std only.
#pragma once

#include <string>
#include <vector>

namespace hpctrain::sys {

// "USR1" or "SIGUSR1" -> SIGUSR1; accepted: USR1, USR2, TERM, INT, HUP, XCPU. -1 otherwise.
int signal_from_name(const std::string& name);
// "USR1,TERM" -> {SIGUSR1, SIGTERM}; "" -> {}. Returns "" or an error text naming the bad entry.
std::string check_signal_list(const std::string& list);
std::vector<int> parse_signal_list(const std::string& list);

// Installs the recording handler for `signals` (replacing their default actions).
void install_stop_handlers(const std::vector<int>& signals);
// The first signal recorded since install_stop_handlers, or 0.
int stop_signal();
// "SIGUSR1" for SIGUSR1.
std::string signal_name(int signal);

}  // namespace hpctrain::sys
