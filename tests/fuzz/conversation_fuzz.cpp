// One record of a conversations file, as `prepare chat` reads it: the input is the JSON line. An
// accepted record must give OpenAI-style messages (a known role, string content each) with one
// loss flag per message, at least one of them set.
#include <filesystem>
#include <stdexcept>
#include <string>

#include "fuzz_target.h"
#include "hpctrain/core/error.h"
#include "hpctrain/data/conversation.h"

namespace hpctrain::fuzz {

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  write_file(dir + "/messages.jsonl",
             R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "héllo"},)"
             R"( {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f"}}]},)"
             R"( {"role": "tool", "content": "1"}, {"role": "assistant", "content": "ok", "train": true}],)"
             R"( "tools": [{"name": "f"}]})");
  write_file(dir + "/sharegpt.jsonl",
             R"({"system": "s", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]})");
  write_file(dir + "/alpaca.jsonl", R"({"instruction": "Add.", "input": "2 and 3", "output": "5"})");
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  const std::string line(reinterpret_cast<const char*>(data), size);
  for (const bool all : {false, true}) {
    data::ConversationOptions options;
    options.train_on_inputs = all;
    try {
      const data::ChatRecord record = data::read_chat_record(line, options);
      const auto& messages = record.variables.at("messages");
      if (!messages.is_array() || messages.size() != record.trained.size() || messages.empty()) {
        throw std::logic_error("messages and their loss flags differ");
      }
      bool any = false;
      for (size_t i = 0; i < messages.size(); ++i) {
        const std::string role = messages[i].at("role").get<std::string>();
        if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
          throw std::logic_error("an accepted unknown role");
        }
        if (!messages[i].at("content").is_string()) throw std::logic_error("accepted content that is not a string");
        any = any || record.trained[i];
      }
      if (!any) throw std::logic_error("accepted a record with nothing to train on");
    } catch (const data::RecordError&) {
      fuzz::record(fuzz::Outcome::kRefused);
      return 0;
    }
  }
  fuzz::record(fuzz::Outcome::kAccepted);
  return 0;
}
