// A model's chat template (tokenizer_config.json's `chat_template`, a chat_template.jinja, or a
// file of the user's) rendered as transformers' apply_chat_template renders it with Jinja2: the
// same text for the constructs real templates use, in a sandbox (no file, environment or network;
// output, loop iterations, macro depth and nesting bounded). The text says which bytes came from
// which message, for the loss mask. Depends on core.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "hpctrain/core/error.h"

namespace hpctrain::data {

namespace jinja {
class Program;
}

// A template that failed on one conversation: raise_exception, an undefined value, a bound
// crossed. The message names the template, line and column.
class ChatTemplateError : public DataError {
 public:
  ChatTemplateError(const std::string& message, bool raised) : DataError(message), raised(raised) {}
  bool raised;  // the template's own raise_exception (it refuses the conversation)
};

// The bytes of the rendered text that came from a string of messages[message].
struct MessageSpan {
  size_t begin = 0;
  size_t end = 0;
  int message = 0;
};

struct RenderedChat {
  std::string text;
  std::vector<MessageSpan> spans;  // sorted, disjoint
};

class ChatTemplate {
 public:
  // `origin` names the template in messages ("DIR/tokenizer_config.json's chat_template"). A
  // template that does not parse, or uses a statement, filter or test outside the engine's
  // subset, is a DataError with its line and column.
  ChatTemplate(std::string_view source, std::string origin);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // `variables`: a JSON object — messages, add_generation_prompt, bos_token, tools, ... — as
  // transformers passes them. Throws ChatTemplateError.
  RenderedChat render(const nlohmann::ordered_json& variables) const;

  const std::string& source() const { return source_; }
  const std::string& origin() const { return origin_; }

 private:
  std::string source_;
  std::string origin_;
  std::unique_ptr<jinja::Program> program_;
};

}  // namespace hpctrain::data
