// A chat template, as `prepare chat`, `generate --chat` and `tokenize --conversations` read it
// from a model directory: the input is the template's source. An accepted template must render a
// conversation of every kind of message, or refuse it with a ChatTemplateError; a render's spans
// must lie inside its text, sorted and disjoint.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "fuzz_target.h"
#include "hpctrain/core/error.h"
#include "hpctrain/data/chat_template.h"

namespace hpctrain::fuzz {
namespace {

const char* const kSeeds[] = {
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}",
    "{%- set ns = namespace(n=0) -%}{%- for m in messages[::-1] if m.role != 'system' -%}"
    "{%- set ns.n = ns.n + loop.index0 -%}{{ m.content.split(' ')[0] | upper ~ ns.n }}"
    "{%- if loop.last %}{{ messages | map(attribute='role') | join(',') }}{% endif -%}{%- endfor -%}",
    "{% macro turn(m, eot='<eot>') %}{{ m['role'] }}: {{ m.content }}{{ eot }}{% endmacro %}"
    "{{ bos_token }}{% for m in messages %}{{ turn(m) }}{% else %}{{ raise_exception('no messages') }}{% endfor %}"
    "{{ tools | tojson(indent=2) if tools is defined else '' }}{{ (1, 2.5, none, 'x' * 3)[1:] }}",
};

nlohmann::ordered_json conversation() {
  return nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": " héllo 日本 😀\r\n"},
                 {"role": "assistant", "content": "<think>x</think>\n\nhi", "tool_calls": [{"function": {"name": "f",
                  "arguments": {"a": [1, 2.5, null, true]}}}]}, {"role": "tool", "content": "42"}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "tools": [{"name": "f"}]})");
}

}  // namespace

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < sizeof kSeeds / sizeof kSeeds[0]; ++i) {
    write_file(dir + "/template-" + std::to_string(i) + ".jinja", kSeeds[i]);
  }
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  static const nlohmann::ordered_json variables = fuzz::conversation();
  const std::string source(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<data::ChatTemplate> chat;
  try {
    chat = std::make_unique<data::ChatTemplate>(source, "fuzz.jinja");
  } catch (const Error& e) {
    if (e.code() != ExitCode::kData) throw;
    fuzz::record(fuzz::Outcome::kRefused);
    return 0;
  }
  try {
    const data::RenderedChat rendered = chat->render(variables);
    size_t previous_end = 0;
    for (const data::MessageSpan& span : rendered.spans) {
      if (span.begin < previous_end || span.end <= span.begin || span.end > rendered.text.size() || span.message < 0 ||
          span.message >= 4) {
        throw std::logic_error("a span outside the text, empty, out of order or of no message");
      }
      previous_end = span.end;
    }
  } catch (const data::ChatTemplateError&) {
    // Refusing this conversation is an accepted template's right.
  }
  fuzz::record(fuzz::Outcome::kAccepted);
  return 0;
}
