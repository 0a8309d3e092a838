// One record of a conversations file, as `prepare chat` reads it: OpenAI-style `messages`
// (roles system/user/assistant/tool, an optional per-message `train` flag), ShareGPT
// (`conversations` of `from`/`value`) or Alpaca (`instruction`, `input`, `output`), told apart by
// their keys or named. The result is the chat template's variables — the messages in OpenAI's
// form, and the record's other keys (`tools`, ...) — and which messages carry the loss. Depends on
// core.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "hpctrain/core/error.h"

namespace hpctrain::data {

enum class ConversationFormat { kAuto, kMessages, kShareGpt, kAlpaca };

// "auto", "messages", "sharegpt", "alpaca"; anything else is a ConfigError naming the choices.
ConversationFormat conversation_format(const std::string& name);

// Why a record is bad, for the report's counts.
enum class BadRecord { kNotJson, kUnknownFormat, kNoMessages, kUnknownRole, kContentNotString, kNothingToTrain };
const char* bad_record_name(BadRecord kind);

// A bad record: its kind, and one line saying what is wrong with it (the caller adds file:line).
class RecordError : public DataError {
 public:
  RecordError(BadRecord kind, const std::string& message) : DataError(message), kind(kind) {}
  BadRecord kind;
};

struct ChatRecord {
  nlohmann::ordered_json variables;  // {"messages": [...], other keys of the record}
  std::vector<bool> trained;         // per message: does its reply carry the loss
};

struct ConversationOptions {
  ConversationFormat format = ConversationFormat::kAuto;
  bool train_on_inputs = false;  // every message carries the loss, not the assistant's alone
};

// One JSON Lines record; throws RecordError. Records nest at most 32 levels deep.
ChatRecord read_chat_record(std::string_view line, const ConversationOptions& options);

}  // namespace hpctrain::data
