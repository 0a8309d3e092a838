// The chat template facade: Jinja2 errors placed in the template, messages' strings tagged.
#include "hpctrain/data/chat_template.h"

#include "jinja_render.h"

namespace hpctrain::data {
namespace {

std::string placed(const std::string& origin, const jinja::TemplateError& e) {
  return origin + " line " + std::to_string(e.line) + ", column " + std::to_string(e.column) + ": " + e.what();
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::string origin) : source_(source), origin_(std::move(origin)) {
  try {
    program_ = std::make_unique<jinja::Program>(source_, jinja::Limits{});
  } catch (const jinja::TemplateError& e) {
    throw DataError(placed(origin_, e));
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

RenderedChat ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object()) throw ChatTemplateError(origin_ + ": the variables are not a JSON object", false);
  jinja::Dict dict;
  try {
    for (const auto& [key, value] : variables.items()) {
      if (key != "messages" || !value.is_array()) {
        dict.emplace_back(key, jinja::from_json(value, -1));
        continue;
      }
      jinja::List messages;
      for (size_t i = 0; i < value.size(); ++i) messages.push_back(jinja::from_json(value[i], static_cast<int>(i)));
      dict.emplace_back(key, jinja::Value::list(std::move(messages)));
    }
    const jinja::Text text = program_->render(dict);
    RenderedChat out{text.bytes, {}};
    for (const jinja::TagSpan& span : text.tags) out.spans.push_back({span.begin, span.end, span.tag});
    return out;
  } catch (const jinja::RaisedError& e) {
    throw ChatTemplateError(placed(origin_, e), true);
  } catch (const jinja::TemplateError& e) {
    throw ChatTemplateError(placed(origin_, e), false);
  } catch (const jinja::EvalError& e) {
    throw ChatTemplateError(origin_ + ": " + e.what(), false);
  }
}

}  // namespace hpctrain::data
