#include "hpctrain/core/activity.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <thread>

#include "hpctrain/core/error.h"

namespace hpctrain::activity {

namespace {

std::uint64_t clock_us() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// The activity and when it began, in one word, so a reader never pairs one activity with
// another's start: microseconds since the clock's epoch << 8 | kind.
std::uint64_t pack(Kind kind, std::uint64_t since_us) { return since_us << 8 | static_cast<std::uint64_t>(kind); }
std::atomic<std::uint64_t> g_activity{pack(Kind::kStarting, clock_us())};
std::atomic<std::int64_t> g_step{0};
std::atomic<std::int64_t> g_collectives{0};
std::atomic<int> g_rank{-1};

constexpr const char* kNames[] = {"starting",   "step",       "loader",          "collective", "in-collective",
                                   "checkpoint", "checkpoint-wait", "evaluation", "finishing"};
constexpr const char* kDescriptions[] = {"starting up",
                                         "in a training step",
                                         "waiting for the loader",
                                         "waiting in a collective",
                                         "in a blocking collective",
                                         "writing a checkpoint",
                                         "in a checkpoint, waiting for the other ranks",
                                         "evaluating",
                                         "finishing"};
constexpr size_t kKinds = std::size(kNames);
static_assert(kKinds == static_cast<size_t>(Kind::kFinishing) + 1 && std::size(kDescriptions) == kKinds);

// Set before training (and a blocking collective's at each one); read by the watch's thread.
std::atomic<double> g_limit_s[kKinds] = {};
std::atomic<const char*> g_limit_option[kKinds] = {};

// HPCTRAIN_FAULT=MODE@RANK:WHERE, parsed once; unset or without '@' and ':' it names no rank.
struct FaultSpec {
  std::string text;
  std::string mode;
  bool names_a_rank = false;
  int rank = 0;
  std::string where;
};

const FaultSpec& fault_spec() {
  static const FaultSpec spec = [] {
    FaultSpec parsed;
    const char* text = std::getenv("HPCTRAIN_FAULT");
    if (text == nullptr) return parsed;
    parsed.text = text;
    const auto at = parsed.text.find('@');
    const auto colon = parsed.text.find(':', at == std::string::npos ? 0 : at);
    if (at == std::string::npos || colon == std::string::npos) return parsed;
    parsed.names_a_rank = true;
    parsed.mode = parsed.text.substr(0, at);
    parsed.rank = std::atoi(parsed.text.substr(at + 1, colon - at - 1).c_str());
    parsed.where = parsed.text.substr(colon + 1);
    return parsed;
  }();
  return spec;
}

bool fault_names_this_rank() { return fault_spec().names_a_rank && fault_spec().rank == g_rank.load(); }

[[noreturn]] void sleep_forever() {
  while (true) std::this_thread::sleep_for(std::chrono::hours(1));
}

// On stderr, for tests that time what follows the fault: "hpctrain: HPCTRAIN_FAULT=<spec> fires
// <where>, unix time <seconds>".
void say_fault_fires(const std::string& spec, const std::string& where) {
  std::fprintf(stderr, "hpctrain: HPCTRAIN_FAULT=%s fires %s, unix time %.3f\n", spec.c_str(), where.c_str(),
               std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
}

// Fired once, on this rank's first arrival at WHERE. `fault_point`: a fault_point(), where the
// modes that go on (delay) or throw (fail) are allowed; an activity's entry only stops or hangs.
void inject_fault(const char* where, bool fault_point) {
  static std::atomic<bool> fired{false};
  if (fired.load() || !fault_names_this_rank()) return;
  const FaultSpec& spec = fault_spec();
  if (spec.where != where || fired.exchange(true)) return;
  say_fault_fires(spec.text, std::string("in ") + where);
  if (spec.mode == "stop") std::raise(SIGSTOP);
  if (spec.mode == "hang") sleep_forever();
  if (!fault_point) return;
  if (spec.mode == "delay") std::this_thread::sleep_for(std::chrono::seconds(3));
  if (spec.mode == "fail") throw CheckpointError("HPCTRAIN_FAULT=" + spec.text + " failed " + where);
}

}  // namespace

CollectiveFault collective_fault(std::int64_t number) {
  static std::atomic<bool> fired{false};
  if (fired.load() || !fault_names_this_rank()) return CollectiveFault::kNone;
  const FaultSpec& spec = fault_spec();
  const std::string prefix = "collective#";
  if (spec.where.rfind(prefix, 0) != 0 || number < std::atoll(spec.where.c_str() + prefix.size()) ||
      fired.exchange(true)) {
    return CollectiveFault::kNone;
  }
  say_fault_fires(spec.text, "at collective #" + std::to_string(number));
  if (spec.mode == "sleep") sleep_forever();
  return spec.mode == "skip"     ? CollectiveFault::kSkip
         : spec.mode == "resize" ? CollectiveFault::kResize
                                 : CollectiveFault::kNone;
}

std::int64_t next_collective() { return g_collectives.load() + 1; }

const char* name(Kind kind) { return kNames[static_cast<int>(kind)]; }

const char* describe(Kind kind) {
  const auto index = static_cast<size_t>(kind);
  return index < std::size(kDescriptions) ? kDescriptions[index] : "in an unknown activity";
}

void set_limit(Kind kind, double seconds, const char* option) {
  g_limit_option[static_cast<size_t>(kind)] = option;
  g_limit_s[static_cast<size_t>(kind)] = seconds;
}

Limit limit(Kind kind) {
  const auto index = static_cast<size_t>(kind);
  if (index >= kKinds) return {};
  const char* option = g_limit_option[index].load();
  return {g_limit_s[index].load(), option == nullptr ? "" : option};
}

Snapshot now() {
  const std::uint64_t activity = g_activity.load();
  Snapshot snapshot;
  snapshot.kind = static_cast<Kind>(activity & 0xff);
  snapshot.seconds_in = static_cast<double>(clock_us() - (activity >> 8)) * 1e-6;
  snapshot.step = g_step.load();
  snapshot.collectives = g_collectives.load();
  return snapshot;
}

void set_rank(int world_rank) { g_rank = world_rank; }
void set_step(std::int64_t step) { g_step = step; }
std::int64_t count_collective() { return ++g_collectives; }

void enter(Kind kind) {
  g_activity = pack(kind, clock_us());
  inject_fault(name(kind), /*fault_point=*/false);
}

void fault_point(const char* where) { inject_fault(where, /*fault_point=*/true); }

Scope::Scope(Kind kind) : previous_(g_activity.load()) { enter(kind); }

Scope::~Scope() { g_activity = previous_; }

}  // namespace hpctrain::activity
