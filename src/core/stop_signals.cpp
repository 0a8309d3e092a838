#include "hpctrain/core/stop_signals.h"

#include <csignal>
#include <sstream>

namespace hpctrain::sys {
namespace {

struct Named {
  const char* name;
  int number;
};
constexpr Named kSignals[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM},
                              {"INT", SIGINT},   {"HUP", SIGHUP},   {"XCPU", SIGXCPU}};

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void record_stop_signal(int signal) {
  if (g_stop_signal == 0) g_stop_signal = signal;
}

}  // namespace

int signal_from_name(const std::string& name) {
  const std::string bare = name.rfind("SIG", 0) == 0 ? name.substr(3) : name;
  for (const Named& s : kSignals) {
    if (bare == s.name) return s.number;
  }
  return -1;
}

std::string signal_name(int signal) {
  for (const Named& s : kSignals) {
    if (signal == s.number) return std::string("SIG") + s.name;
  }
  return "signal " + std::to_string(signal);
}

std::string check_signal_list(const std::string& list) {
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (signal_from_name(item) < 0) {
      return "has '" + item + "', not one of USR1, USR2, TERM, INT, HUP, XCPU";
    }
  }
  return "";
}

std::vector<int> parse_signal_list(const std::string& list) {
  std::vector<int> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (signal_from_name(item) > 0) out.push_back(signal_from_name(item));
  }
  return out;
}

void install_stop_handlers(const std::vector<int>& signals) {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // interrupted reads and writes resume
  for (const int signal : signals) sigaction(signal, &action, nullptr);
}

int stop_signal() { return g_stop_signal; }

}  // namespace hpctrain::sys
