// A parsed chat template and its renderer: Jinja2's statements, scopes (each loop iteration and
// macro call its own), `loop.*`, macros, and the sandbox's bounds — output bytes, loop iterations,
// macro call depth, nesting — each a TemplateError at its place when crossed. Internal to data.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "jinja_ast.h"
#include "jinja_value.h"

namespace hpctrain::data::jinja {

struct Limits {
  size_t max_template_bytes = size_t{1} << 20;
  size_t max_output_bytes = size_t{16} << 20;  // also the longest string and the total bytes emitted
  std::int64_t max_iterations = 1'000'000;     // loop iterations of one render, all loops together
  int max_call_depth = 32;                     // macros calling macros
  int max_nesting = 64;                        // the parser's
};

class Program {
 public:
  // Throws TemplateError for a template that does not parse or uses a filter or test this engine
  // does not have.
  Program(std::string_view source, const Limits& limits);
  ~Program();
  // The output with its tags; throws TemplateError (RaisedError for raise_exception).
  Text render(const Dict& variables) const;

 private:
  std::unique_ptr<Node> root_;
  Limits limits_;
};

}  // namespace hpctrain::data::jinja
