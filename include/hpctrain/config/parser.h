// Reads a configuration: INI file (Boost.ProgramOptions) then `--section.key=value` overrides
// (command line wins), each value parsed and checked through the option table. Every user error
// is a ConfigError naming the file or "command line", the key, and what is allowed.
// Depends on core and the option table; only config/*.cpp includes Boost.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "hpctrain/config/config.h"

namespace hpctrain::config {

// A flag that belongs to one subcommand (e.g. `--checkpoint FILE` of eval, `--print-config`).
struct Flag {
  std::string name;  // without the leading "--"
  bool takes_value = false;
  std::string help;
};

struct ParsedArgs {
  Config config;
  std::string config_file;                   // "" when none was given
  std::map<std::string, std::string> flags;  // the subcommand's flags that were given ("" if valueless)
  std::vector<std::string> positionals;

  bool has(const std::string& flag) const { return flags.count(flag) != 0; }
};

// Parses the arguments after the subcommand name. `--config FILE` is always accepted; table options
// are accepted only when `with_options` is true. Required options are enforced only when
// `require_complete` is true (so `--help` works without a config).
ParsedArgs parse_args(const std::vector<std::string>& args, const std::vector<Flag>& flags,
                      bool with_options, bool require_complete);

// Resolves a configuration from an INI file ("" for none) and "section.key" -> text overrides.
Config resolve(const std::string& ini_path, const std::map<std::string, std::string>& overrides,
               bool require_complete = true);

// The resolved configuration as an INI text that `resolve` reads back to the same Config.
std::string to_ini(const Config& config);

// "section.key" -> value, for INI text in to_ini's layout (lines that are neither are skipped).
std::map<std::string, std::string> ini_values(const std::string& text);

// Keys whose values differ between two INI texts written by to_ini ("section.key" -> {a, b}; a
// key present in one only has "" on the other side).
std::map<std::string, std::pair<std::string, std::string>> ini_differences(const std::string& a,
                                                                           const std::string& b);

// Every option with its type, default and meaning, grouped by section (for --help).
std::string options_help();

// docs/configuration.md, generated from the option table.
std::string options_markdown();

// The closest candidate by edit distance, or "" when none is close enough to be a useful hint.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace hpctrain::config
