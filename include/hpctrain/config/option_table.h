// The option table: one row per option (name, type, default, help, check) and the binding of each
// row to its field in Config. Everything that lists options — parsing, --help, --print-config,
// docs/configuration.md — reads this table, so an option is added in exactly one place.
// Depends on core and config.h.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/config/config.h"

namespace hpctrain::config {

enum class OptionType { kInt, kFloat, kString, kBool };

const char* type_name(OptionType type);

struct Option {
  std::string name;  // "section.key", identical in INI files and on the command line
  OptionType type;
  std::optional<std::string> default_text;  // nullopt: required
  std::string help;
  std::string allowed;  // human-readable constraint, e.g. ">= 1" or "adamw|sgd"; empty: any value
  // Parses `text` into the bound field. Throws ConfigError(message without location) when the
  // text is not of the type or violates the check.
  std::function<void(Config&, const std::string& text)> assign;
  // The field's current value as text (the inverse of assign).
  std::function<std::string(const Config&)> render;

  std::string section() const { return name.substr(0, name.find('.')); }
  std::string key() const { return name.substr(name.find('.') + 1); }
  bool required() const { return !default_text.has_value(); }
};

const std::vector<Option>& option_table();

// nullptr when there is no such option.
const Option* find_option(const std::string& name);

// The section names in the order the table lists them.
std::vector<std::string> sections();

}  // namespace hpctrain::config
