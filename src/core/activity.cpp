#include "hpctrain/core/activity.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace hpctrain::activity {

namespace {

double clock_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::atomic<int> g_kind{static_cast<int>(Kind::kStarting)};
std::atomic<double> g_since{clock_s()};
std::atomic<std::int64_t> g_step{0};
std::atomic<std::int64_t> g_collectives{0};
std::atomic<int> g_rank{-1};

constexpr const char* kNames[] = {"starting", "step", "loader", "collective", "checkpoint", "evaluation", "finishing"};
constexpr const char* kDescriptions[] = {"starting up",
                                         "in a training step",
                                         "waiting for the loader",
                                         "waiting in a collective",
                                         "writing a checkpoint or waiting for one",
                                         "evaluating",
                                         "finishing"};

// HPCTRAIN_FAULT=MODE@RANK:WHERE, fired once, on this rank's first entry into WHERE.
void inject_fault(Kind kind) {
  static const char* const spec = std::getenv("HPCTRAIN_FAULT");
  static std::atomic<bool> fired{false};
  if (spec == nullptr || fired.load()) return;
  const std::string text(spec);
  const auto at = text.find('@');
  const auto colon = text.find(':', at == std::string::npos ? 0 : at);
  if (at == std::string::npos || colon == std::string::npos) return;
  if (std::atoi(text.substr(at + 1, colon - at - 1).c_str()) != g_rank.load()) return;
  if (text.substr(colon + 1) != name(kind) || fired.exchange(true)) return;
  const std::string mode = text.substr(0, at);
  if (mode == "stop") std::raise(SIGSTOP);
  if (mode == "hang") {
    while (true) std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

}  // namespace

const char* name(Kind kind) { return kNames[static_cast<int>(kind)]; }
const char* describe(Kind kind) { return kDescriptions[static_cast<int>(kind)]; }

bool is_bounded(Kind kind) { return kind == Kind::kLoader; }

Snapshot now() {
  Snapshot snapshot;
  snapshot.kind = static_cast<Kind>(g_kind.load());
  snapshot.seconds_in = clock_s() - g_since.load();
  snapshot.step = g_step.load();
  snapshot.collectives = g_collectives.load();
  return snapshot;
}

void set_rank(int world_rank) { g_rank = world_rank; }
void set_step(std::int64_t step) { g_step = step; }
std::int64_t count_collective() { return ++g_collectives; }

Scope::Scope(Kind kind) : previous_(static_cast<Kind>(g_kind.load())), previous_since_(g_since.load()) {
  g_since = clock_s();
  g_kind = static_cast<int>(kind);
  inject_fault(kind);
}

Scope::~Scope() {
  g_kind = static_cast<int>(previous_);
  g_since = previous_since_;
}

}  // namespace hpctrain::activity
