// The three conversation layouts read into the chat template's messages with their loss flags,
// and each kind of bad record refused with its kind and one line.
#include "hpctrain/data/conversation.h"

#include <gtest/gtest.h>

namespace hpctrain::data {
namespace {

using ojson = nlohmann::ordered_json;

ChatRecord read(const std::string& line, ConversationOptions options = {}) { return read_chat_record(line, options); }

BadRecord refusal(const std::string& line, ConversationOptions options = {}) {
  try {
    read_chat_record(line, options);
  } catch (const RecordError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.kind;
  }
  ADD_FAILURE() << "accepted: " << line;
  return BadRecord::kNotJson;
}

TEST(Conversation, OpenAiMessagesKeepTheirKeysAndTrainTheAssistant) {
  const ChatRecord r = read(R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
      {"role": "assistant", "content": "a", "reasoning_content": "r"}, {"role": "user", "content": "u2"},
      {"role": "assistant", "content": "a2", "train": false}], "tools": [{"name": "f"}]})");
  EXPECT_EQ(r.trained, (std::vector<bool>{false, false, true, false, false}));
  EXPECT_EQ(r.variables["messages"][2]["reasoning_content"], "r");
  EXPECT_FALSE(r.variables["messages"][4].contains("train"));  // the flag is ours, not the template's
  EXPECT_EQ(r.variables["tools"][0]["name"], "f");
}

TEST(Conversation, AToolCallMayHaveNoContent) {
  const ChatRecord r = read(R"({"messages": [{"role": "user", "content": "w?"},
      {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
      {"role": "tool", "content": "20C"}, {"role": "assistant", "content": "20C."}]})");
  EXPECT_EQ(r.variables["messages"][1]["content"], "");
  EXPECT_EQ(r.trained, (std::vector<bool>{false, true, false, true}));
}

TEST(Conversation, ShareGptTurnsBecomeMessages) {
  const ChatRecord r = read(R"({"system": "be brief", "conversations": [{"from": "human", "value": "hi"},
      {"from": "gpt", "value": "hello"}]})");
  const ojson expected = ojson::parse(R"([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
      {"role": "assistant", "content": "hello"}])");
  EXPECT_EQ(r.variables["messages"], expected);
  EXPECT_EQ(r.trained, (std::vector<bool>{false, false, true}));
}

TEST(Conversation, AlpacaIsAUserTurnAndAReply) {
  const ChatRecord r = read(R"({"instruction": "Add.", "input": "2 and 3", "output": "5"})");
  const ojson expected =
      ojson::parse(R"([{"role": "user", "content": "Add.\n\n2 and 3"}, {"role": "assistant", "content": "5"}])");
  EXPECT_EQ(r.variables["messages"], expected);
  EXPECT_EQ(read(R"({"instruction": "Hi", "input": "", "output": "Hello"})").variables["messages"][0]["content"], "Hi");
}

TEST(Conversation, TrainOnInputsTrainsEveryMessage) {
  ConversationOptions options;
  options.train_on_inputs = true;
  const ChatRecord r = read(R"({"instruction": "Add.", "output": "5"})", options);
  EXPECT_EQ(r.trained, (std::vector<bool>{true, true}));
}

TEST(Conversation, ANamedFormatIsReadAsThatFormat) {
  ConversationOptions options;
  options.format = conversation_format("alpaca");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}]})", options), BadRecord::kContentNotString);
  EXPECT_THROW(conversation_format("chatml"), ConfigError);
}

TEST(Conversation, BadRecordsAreRefusedByKind) {
  EXPECT_EQ(refusal("{\"messages\": ["), BadRecord::kNotJson);
  EXPECT_EQ(refusal("[1, 2]"), BadRecord::kNotJson);
  EXPECT_EQ(refusal(std::string(40, '[') + std::string(40, ']')), BadRecord::kNotJson);
  EXPECT_EQ(refusal(R"({"text": "plain"})"), BadRecord::kUnknownFormat);
  EXPECT_EQ(refusal(R"({"messages": []})"), BadRecord::kNoMessages);
  EXPECT_EQ(refusal(R"({"messages": "hi"})"), BadRecord::kNoMessages);
  EXPECT_EQ(refusal(R"({"messages": [{"role": "narrator", "content": "x"}]})"), BadRecord::kUnknownRole);
  EXPECT_EQ(refusal(R"({"conversations": [{"from": "bot", "value": "x"}]})"), BadRecord::kUnknownRole);
  EXPECT_EQ(refusal(R"({"messages": [{"role": "assistant", "content": ["a"]}]})"), BadRecord::kContentNotString);
  EXPECT_EQ(refusal(R"({"messages": [{"role": "assistant"}]})"), BadRecord::kContentNotString);
  EXPECT_EQ(refusal(R"({"messages": [{"role": "assistant", "content": "a", "train": 1}]})"),
            BadRecord::kContentNotString);
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "only a question"}]})"), BadRecord::kNothingToTrain);
}

}  // namespace
}  // namespace hpctrain::data
