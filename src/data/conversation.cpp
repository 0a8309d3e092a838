// The three conversation layouts fine-tuning data comes in, read into OpenAI's messages.
#include "hpctrain/data/conversation.h"

#include <map>

#include "json_depth.h"

namespace hpctrain::data {
namespace {

using ojson = nlohmann::ordered_json;

constexpr size_t kMaxDepth = 32;  // tool calls' arguments nest a few levels

ConversationFormat detect(const ojson& record) {
  if (record.contains("messages")) return ConversationFormat::kMessages;
  if (record.contains("conversations")) return ConversationFormat::kShareGpt;
  if (record.contains("instruction") || record.contains("output")) return ConversationFormat::kAlpaca;
  throw RecordError(BadRecord::kUnknownFormat,
                    "no \"messages\", \"conversations\" or \"instruction\"/\"output\": not a conversation");
}

const std::string& text_field(const ojson& object, const char* key, const std::string& where, bool required) {
  static const std::string empty;
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    if (required) throw RecordError(BadRecord::kContentNotString, where + " has no \"" + key + "\"");
    return empty;
  }
  if (!it->is_string()) {
    throw RecordError(BadRecord::kContentNotString,
                      where + "'s \"" + key + "\" is " + it->type_name() + ", not a string");
  }
  return it->get_ref<const std::string&>();
}

void check_role(const std::string& role, const std::string& where) {
  if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
    throw RecordError(BadRecord::kUnknownRole,
                      where + " has the role \"" + role + "\" (known: system, user, assistant, tool)");
  }
}

const ojson& message_list(const ojson& record, const char* key) {
  const auto it = record.find(key);
  if (it == record.end() || !it->is_array() || it->empty()) {
    throw RecordError(BadRecord::kNoMessages, std::string("\"") + key + "\" is not a non-empty list");
  }
  return *it;
}

void read_messages(const ojson& record, ChatRecord& out) {
  const ojson& list = message_list(record, "messages");
  ojson messages = ojson::array();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "message " + std::to_string(i + 1);
    if (!list[i].is_object()) throw RecordError(BadRecord::kNoMessages, where + " is not a JSON object");
    ojson message = list[i];
    const std::string role = text_field(message, "role", where, true);
    check_role(role, where);
    // OpenAI allows a null content beside tool calls.
    const bool tool_call = role == "assistant" && message.contains("tool_calls") && message["content"].is_null();
    if (tool_call) message["content"] = "";
    text_field(message, "content", where, true);
    bool train = role == "assistant";
    if (message.contains("train")) {
      if (!message["train"].is_boolean()) {
        throw RecordError(BadRecord::kContentNotString, where + "'s \"train\" is not true or false");
      }
      train = message["train"].get<bool>();
      message.erase("train");
    }
    out.trained.push_back(train);
    messages.push_back(std::move(message));
  }
  out.variables["messages"] = std::move(messages);
}

void read_sharegpt(const ojson& record, ChatRecord& out) {
  static const std::map<std::string, std::string> kRoles = {{"system", "system"},       {"human", "user"},
                                                            {"user", "user"},           {"gpt", "assistant"},
                                                            {"assistant", "assistant"}, {"tool", "tool"}};
  const ojson& list = message_list(record, "conversations");
  ojson messages = ojson::array();
  const std::string& system = text_field(record, "system", "the record", false);
  if (!system.empty()) {
    messages.push_back({{"role", "system"}, {"content", system}});
    out.trained.push_back(false);
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "turn " + std::to_string(i + 1);
    if (!list[i].is_object()) throw RecordError(BadRecord::kNoMessages, where + " is not a JSON object");
    const std::string& from = text_field(list[i], "from", where, true);
    const auto role = kRoles.find(from);
    if (role == kRoles.end()) {
      throw RecordError(BadRecord::kUnknownRole,
                        where + " is from \"" + from + "\" (known: system, human, user, gpt, assistant, tool)");
    }
    messages.push_back({{"role", role->second}, {"content", text_field(list[i], "value", where, true)}});
    out.trained.push_back(role->second == "assistant");
  }
  out.variables["messages"] = std::move(messages);
}

void read_alpaca(const ojson& record, ChatRecord& out) {
  const std::string& instruction = text_field(record, "instruction", "the record", true);
  const std::string& input = text_field(record, "input", "the record", false);
  const std::string& system = text_field(record, "system", "the record", false);
  ojson messages = ojson::array();
  if (!system.empty()) {
    messages.push_back({{"role", "system"}, {"content", system}});
    out.trained.push_back(false);
  }
  messages.push_back({{"role", "user"}, {"content", input.empty() ? instruction : instruction + "\n\n" + input}});
  messages.push_back({{"role", "assistant"}, {"content", text_field(record, "output", "the record", true)}});
  out.trained.push_back(false);
  out.trained.push_back(true);
  out.variables["messages"] = std::move(messages);
}

}  // namespace

ConversationFormat conversation_format(const std::string& name) {
  if (name == "auto") return ConversationFormat::kAuto;
  if (name == "messages") return ConversationFormat::kMessages;
  if (name == "sharegpt") return ConversationFormat::kShareGpt;
  if (name == "alpaca") return ConversationFormat::kAlpaca;
  throw ConfigError("--format " + name + ": not a conversation format (auto, messages, sharegpt, alpaca)");
}

const char* bad_record_name(BadRecord kind) {
  switch (kind) {
    case BadRecord::kNotJson:
      return "not a JSON object";
    case BadRecord::kUnknownFormat:
      return "no conversation";
    case BadRecord::kNoMessages:
      return "no messages";
    case BadRecord::kUnknownRole:
      return "an unknown role";
    case BadRecord::kContentNotString:
      return "content not a string";
    case BadRecord::kNothingToTrain:
      return "nothing to train on";
  }
  return "bad";
}

ChatRecord read_chat_record(std::string_view line, const ConversationOptions& options) {
  const ojson record = ojson::parse(line.begin(), line.end(), nullptr, false);
  if (!record.is_object()) throw RecordError(BadRecord::kNotJson, "not a JSON object");
  if (nesting_depth(record) > kMaxDepth) {
    throw RecordError(BadRecord::kNotJson, "nests deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  const ConversationFormat format = options.format == ConversationFormat::kAuto ? detect(record) : options.format;
  ChatRecord out;
  const char* layout_keys[] = {"messages", "conversations", "instruction", "input", "output", "system"};
  for (const auto& [key, value] : record.items()) {
    bool layout = false;
    for (const char* k : layout_keys) layout = layout || key == k;
    if (!layout) out.variables[key] = value;  // tools, documents, ...: the template's to use
  }
  if (format == ConversationFormat::kMessages) read_messages(record, out);
  if (format == ConversationFormat::kShareGpt) read_sharegpt(record, out);
  if (format == ConversationFormat::kAlpaca) read_alpaca(record, out);
  if (options.train_on_inputs) out.trained.assign(out.trained.size(), true);
  bool any = false;
  for (const bool t : out.trained) any = any || t;
  if (!any)
    throw RecordError(BadRecord::kNothingToTrain,
                      "no message carries the loss (no assistant reply, or all \"train\": false)");
  return out;
}

}  // namespace hpctrain::data
