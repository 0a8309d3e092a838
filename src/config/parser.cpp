#include "hpctrain/config/parser.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "hpctrain/config/option_table.h"
#include "hpctrain/core/error.h"

namespace po = boost::program_options;

namespace hpctrain::config {
namespace {

std::vector<std::string> option_names() {
  std::vector<std::string> names;
  for (const auto& option : option_table()) names.push_back(option.name);
  return names;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string match = closest_match(word, candidates);
  return match.empty() ? "" : " (did you mean '" + match + "'?)";
}

// Applies one "key = text" from `origin` (a file name or "command line").
void assign(Config& config, const std::string& origin, const std::string& key,
            const std::string& text) {
  const Option* option = find_option(key);
  if (option == nullptr) {
    throw ConfigError(origin + ": unknown option '" + key + "'" + did_you_mean(key, option_names()) +
                      "; `hpctrain train --help` lists them");
  }
  try {
    option->assign(config, text);
  } catch (const ConfigError& e) {
    std::string allowed = type_name(option->type);
    if (!option->allowed.empty()) allowed += " " + option->allowed;
    throw ConfigError(origin + ": " + key + ": " + e.what() + " (allowed: " + allowed + ")");
  }
}

std::string trimmed(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

// The file's text, without the UTF-8 byte-order mark some editors save first.
std::string read_text(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) {
    throw ConfigError("config file '" + path + "' not found (give an existing file to --config)");
  }
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) throw ConfigError("config file '" + path + "' cannot be read");
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  return text;
}

// A key given twice in one file would be taken silently, the last one winning: refused, with both
// lines. Lines are read as Boost reads them: '#' starts a comment, "[section]" names the section.
void refuse_repeated_keys(const std::string& path, const std::string& text) {
  std::map<std::string, int> first_line;  // "section.key" -> line
  std::string section;
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    line = trimmed(line.substr(0, line.find('#')));
    if (line.size() >= 2 && line.front() == '[' && line.back() == ']') {
      section = trimmed(line.substr(1, line.size() - 2));
      continue;
    }
    const size_t equals = line.find('=');
    if (equals == std::string::npos) continue;  // Boost names the malformed line
    const std::string key = trimmed(line.substr(0, equals));
    const std::string name = section.empty() ? key : section + "." + key;
    const auto [first, fresh] = first_line.emplace(name, number);
    if (!fresh) {
      throw ConfigError(path + ":" + std::to_string(number) + ": " + name + " is given twice, on lines " +
                        std::to_string(first->second) + " and " + std::to_string(number) + "; keep one");
    }
  }
}

// (key, text) pairs of an INI file in file order; unknown keys are kept so assign() can name them.
std::vector<std::pair<std::string, std::string>> read_ini(const std::string& path) {
  const std::string text = read_text(path);
  refuse_repeated_keys(path, text);
  std::istringstream in(text);
  std::vector<std::pair<std::string, std::string>> pairs;
  try {
    po::options_description none;
    const auto parsed = po::parse_config_file(in, none, /*allow_unregistered=*/true);
    for (const auto& opt : parsed.options) {
      if (opt.value.size() != 1) {
        throw ConfigError(path + ": " + opt.string_key + ": expected one value");
      }
      pairs.emplace_back(opt.string_key, opt.value.front());
    }
  } catch (const po::error& e) {
    throw ConfigError(path + ": " + e.what());
  }
  // Keys outside any [section] have no dot; Boost reads them as bare names.
  for (const auto& [key, value] : pairs) {
    if (key.find('.') == std::string::npos) {
      throw ConfigError(path + ": key '" + key + "' is outside a [section]" +
                        did_you_mean(key, option_names()));
    }
  }
  return pairs;
}

void apply_defaults(Config& config) {
  for (const auto& option : option_table()) {
    if (option.default_text) option.assign(config, *option.default_text);
  }
}

}  // namespace

Config resolve(const std::string& ini_path, const std::map<std::string, std::string>& overrides,
               bool require_complete) {
  Config config;
  apply_defaults(config);
  std::map<std::string, bool> given;
  if (!ini_path.empty()) {
    for (const auto& [key, text] : read_ini(ini_path)) {
      assign(config, ini_path, key, text);
      given[key] = true;
    }
  }
  for (const auto& [key, text] : overrides) {
    assign(config, "command line", key, text);
    given[key] = true;
  }
  if (require_complete) {
    for (const auto& option : option_table()) {
      if (option.required() && !given[option.name]) {
        throw ConfigError("missing required option " + option.name + ": set `" + option.key() +
                          " = ...` under [" + option.section() + "] in the config file or pass --" +
                          option.name + "=...");
      }
    }
  }
  return config;
}

ParsedArgs parse_args(const std::vector<std::string>& args, const std::vector<Flag>& flags,
                      bool with_options, bool require_complete) {
  po::options_description desc;
  desc.add_options()("config", po::value<std::string>(), "INI file");
  for (const auto& flag : flags) {
    if (flag.takes_value) {
      desc.add_options()(flag.name.c_str(), po::value<std::string>(), flag.help.c_str());
    } else {
      desc.add_options()(flag.name.c_str(), flag.help.c_str());
    }
  }
  if (with_options) {
    for (const auto& option : option_table()) {
      auto* value = po::value<std::string>();
      if (option.type == OptionType::kBool) value->implicit_value("true");
      desc.add_options()(option.name.c_str(), value, option.help.c_str());
    }
  }
  po::positional_options_description positional;
  positional.add("positional__", -1);
  po::options_description all(desc);
  all.add_options()("positional__", po::value<std::vector<std::string>>());

  std::vector<std::string> known;
  for (const auto& opt : desc.options()) known.push_back(opt->long_name());

  // Boost rejects "--key=" (an empty value); "--key" "" means the same and Boost accepts it.
  std::vector<std::string> tokens;
  for (const auto& arg : args) {
    if (arg.size() > 3 && arg.compare(0, 2, "--") == 0 && arg.back() == '=' &&
        arg.find('=') == arg.size() - 1) {
      tokens.push_back(arg.substr(0, arg.size() - 1));
      tokens.emplace_back();
    } else {
      tokens.push_back(arg);
    }
  }
  ParsedArgs out;
  std::map<std::string, std::string> overrides;
  try {
    const auto parsed = po::command_line_parser(tokens)
                            .options(all)
                            .positional(positional)
                            .style(po::command_line_style::unix_style ^
                                   po::command_line_style::allow_guessing)
                            .allow_unregistered()
                            .run();
    for (const auto& opt : parsed.options) {
      if (opt.unregistered) {
        const std::string& word = opt.original_tokens.empty() ? opt.string_key
                                                              : opt.original_tokens.front();
        std::string name = word;
        name.erase(0, name.find_first_not_of('-'));
        name = name.substr(0, name.find('='));
        throw ConfigError("command line: unknown option '" + word + "'" +
                          did_you_mean(name, known) + "; see --help");
      }
      const std::string text = opt.value.empty() ? "" : opt.value.back();
      if (opt.string_key == "positional__") {
        out.positionals.insert(out.positionals.end(), opt.value.begin(), opt.value.end());
      } else if (opt.string_key == "config") {
        out.config_file = text;
      } else if (find_option(opt.string_key) != nullptr && with_options) {
        overrides[opt.string_key] = text;
      } else {
        out.flags[opt.string_key] = text;
      }
    }
  } catch (const po::error& e) {
    throw ConfigError(std::string("command line: ") + e.what() + "; see --help");
  }
  out.config = resolve(out.config_file, overrides, require_complete);
  return out;
}

std::string to_ini(const Config& config) {
  std::ostringstream out;
  for (const auto& section : sections()) {
    out << "[" << section << "]\n";
    for (const auto& option : option_table()) {
      if (option.section() == section) out << option.key() << " = " << option.render(config) << "\n";
    }
    out << "\n";
  }
  return out.str();
}

std::map<std::string, std::string> ini_values(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  std::string section;
  while (std::getline(in, line)) {
    if (line.size() > 2 && line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const auto equals = line.find(" = ");
    if (equals != std::string::npos) out[section + "." + line.substr(0, equals)] = line.substr(equals + 3);
  }
  return out;
}

std::map<std::string, std::pair<std::string, std::string>> ini_differences(const std::string& a,
                                                                           const std::string& b) {
  const auto left = ini_values(a);
  const auto right = ini_values(b);
  std::map<std::string, std::pair<std::string, std::string>> out;
  for (const auto& [key, value] : left) {
    const auto found = right.find(key);
    const std::string other = found == right.end() ? "" : found->second;
    if (other != value) out[key] = {value, other};
  }
  for (const auto& [key, value] : right) {
    if (left.count(key) == 0) out[key] = {"", value};
  }
  return out;
}

std::string options_help() {
  std::ostringstream out;
  for (const auto& section : sections()) {
    out << "\n[" << section << "]\n";
    for (const auto& option : option_table()) {
      if (option.section() != section) continue;
      out << "  --" << option.name << "=" << type_name(option.type)
          << (option.required() ? "  (required)" : "  (default: " + *option.default_text + ")")
          << "\n      " << option.help;
      if (!option.allowed.empty()) out << " Allowed: " << option.allowed << ".";
      out << "\n";
    }
  }
  return out.str();
}

std::string options_markdown() {
  std::ostringstream out;
  out << "# Configuration\n\n"
      << "<!-- Generated by `hpctrain docs options` from the option table "
         "(src/config/option_table.cpp); do not edit by hand. -->\n\n"
      << "Options are read from an INI file (`--config FILE`) and from the command line as "
         "`--section.key=value`; the command line wins. The same `section.key` names are used "
         "in both places. `hpctrain train --print-config` prints the resolved configuration, "
         "which is also saved as `<run.dir>/config.ini`.\n\n"
      << "An unknown key, a value of the wrong type or out of range, a missing file or a missing "
         "required option stops the program with one error line and exit code 2 before anything "
         "is written.\n";
  for (const auto& section : sections()) {
    out << "\n## [" << section << "]\n\n"
        << "| option | type | default | allowed | meaning |\n"
        << "|---|---|---|---|---|\n";
    for (const auto& option : option_table()) {
      if (option.section() != section) continue;
      out << "| `" << option.name << "` | " << type_name(option.type) << " | "
          << (option.required() ? "*required*" : "`" + *option.default_text + "`") << " | "
          << option.allowed << " | " << option.help << " |\n";
    }
  }
  return out.str();
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  // Levenshtein distance; a hint is useful only when at most a third of the word differs. Ties go
  // to the longer common prefix ("optim.lrate" -> "optim.lr", not "optim.name").
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = up;
      }
    }
    return row[b.size()];
  };
  auto common_prefix = [](const std::string& a, const std::string& b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
  };
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  size_t best_prefix = 0;
  for (const auto& candidate : candidates) {
    const size_t d = distance(word, candidate);
    const size_t prefix = common_prefix(word, candidate);
    if (d < best_distance || (d == best_distance && !best.empty() && prefix > best_prefix)) {
      best = candidate;
      best_distance = d;
      best_prefix = prefix;
    }
  }
  return best;
}

}  // namespace hpctrain::config
