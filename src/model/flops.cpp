#include "hpctrain/model/flops.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "hpctrain/core/error.h"

namespace hpctrain::model {
namespace {

// Note [Counting FLOPs]: every ATen op announces itself, with its inputs, to RecordFunction
// callbacks (the mechanism torch.profiler's with_flops uses). A thread-local callback sees the
// ops of the forward pass on this thread, eager or TorchScript alike, and the shapes give the
// multiply-adds. Ops nest (matmul calls mm, conv2d calls convolution calls _convolution), so an
// op is counted only when no counted op encloses it.
struct Counter {
  double flops = 0;
  int depth = 0;  // counted ops entered and not yet left
};
thread_local Counter* active = nullptr;

// A marker handed from a counted op's start to its end.
struct Counted final : at::ObserverContext {};

std::vector<std::int64_t> sizes_of(const c10::IValue& value) {
  if (!value.isTensor()) return {};
  return value.toTensor().sizes().vec();
}

std::int64_t product(const std::vector<std::int64_t>& sizes, size_t from = 0) {
  std::int64_t p = 1;
  for (size_t i = from; i < sizes.size(); ++i) p *= sizes[i];
  return p;
}

// An int[] argument; also one boxed as a generic list (libtorch 2's SymInt[] may be).
std::vector<std::int64_t> int_list(const c10::IValue& value) {
  if (value.isIntList()) return value.toIntVector();
  std::vector<std::int64_t> ints;
  if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isInt()) ints.push_back(element.toInt());
    }
  }
  return ints;
}

// a [.., n, k] @ b [.., k, m]: 2 n k m per matrix of the batch.
double product_flops(const c10::IValue& a, const c10::IValue& b) {
  const auto x = sizes_of(a);
  const auto y = sizes_of(b);
  if (x.size() < 2 || y.size() < 2) return 0;
  return 2.0 * static_cast<double>(product(x)) * static_cast<double>(y.back());
}

// aten::convolution / aten::_convolution (input, weight, bias, stride, padding, dilation,
// transposed, output_padding, groups, ...). Each output element of a convolution takes
// weight.numel() / weight.size(0) multiply-adds (weight [out, in/groups, k...]); in a transposed
// one (weight [in, out/groups, k...]) each input element takes as many.
double convolution_flops(c10::ArrayRef<const c10::IValue> in) {
  if (in.size() < 9) return 0;
  const auto input = sizes_of(in[0]);
  const auto weight = sizes_of(in[1]);
  if (input.size() < 3 || weight.size() != input.size() || weight[0] == 0) return 0;
  const double per_element = static_cast<double>(product(weight, 1));
  if (in[6].isBool() && in[6].toBool()) {
    return 2.0 * static_cast<double>(product(input)) * per_element;
  }
  const auto stride = int_list(in[3]);
  const auto padding = int_list(in[4]);
  const auto dilation = int_list(in[5]);
  const size_t spatial = input.size() - 2;
  // stride, padding and dilation may give one value for every dimension
  auto in_dim = [](const std::vector<std::int64_t>& v, size_t d, std::int64_t none) {
    return v.empty() ? none : v[std::min(d, v.size() - 1)];
  };
  double outputs = static_cast<double>(input[0] * weight[0]);
  for (size_t d = 0; d < spatial; ++d) {
    const std::int64_t extent = (input[2 + d] + 2 * in_dim(padding, d, 0) - in_dim(dilation, d, 1) * (weight[2 + d] - 1) - 1) /
                                    in_dim(stride, d, 1) + 1;
    outputs *= static_cast<double>(std::max<std::int64_t>(0, extent));
  }
  return 2.0 * outputs * per_element;
}

// Scaled dot-product attention, query [.., L, E], key [.., S, E], value [.., S, Ev]: the scores
// (L x S of E multiply-adds) and their weighted sum (L x Ev of S) for each of the query's heads.
double attention_flops(c10::ArrayRef<const c10::IValue> in) {
  if (in.size() < 3) return 0;
  const auto q = sizes_of(in[0]);
  const auto k = sizes_of(in[1]);
  const auto v = sizes_of(in[2]);
  if (q.size() < 2 || k.size() < 2 || v.empty()) return 0;
  const double products = static_cast<double>(product(q) / q.back()) * static_cast<double>(k[k.size() - 2]);
  return 2.0 * products * static_cast<double>(q.back() + v.back());
}

bool ends_with(const std::string& text, const char* end) {
  const size_t n = std::strlen(end);
  return text.size() >= n && text.compare(text.size() - n, n, end) == 0;
}

// The FLOPs of op `name`, or < 0 when it is not an op that is counted.
double op_flops(const char* name, c10::ArrayRef<const c10::IValue> in) {
  if (std::strncmp(name, "aten::", 6) != 0) return -1;
  const std::string op = name + 6;
  if (op == "mm" || op == "bmm") return in.size() >= 2 ? product_flops(in[0], in[1]) : 0;
  // addmm(bias, a, b), and the fused bias + activation libtorch's fast paths use.
  if (op == "addmm" || op == "baddbmm" || op == "_addmm_activation") {
    return in.size() >= 3 ? product_flops(in[1], in[2]) : 0;
  }
  if (op == "convolution" || op == "_convolution") return convolution_flops(in);
  // Every variant (math, flash, memory-efficient, cuDNN) of scaled_dot_product_attention.
  if (op.find("scaled_dot_product") != std::string::npos && !ends_with(op, "_backward")) return attention_flops(in);
  return -1;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Counter* counter = active;
  if (counter == nullptr) return nullptr;
  const double flops = op_flops(fn.name(), fn.inputs());
  if (flops < 0) return nullptr;
  if (counter->depth == 0) counter->flops += flops;
  ++counter->depth;
  return std::make_unique<Counted>();
}

void on_end(const at::RecordFunction&, at::ObserverContext* context) {
  if (context != nullptr && active != nullptr) --active->depth;
}

}  // namespace

double count_flops(const std::function<void()>& run) {
  HT_CHECK(active == nullptr, "count_flops does not nest");
  Counter counter;
  active = &counter;
  const at::CallbackHandle handle =
      at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end).needsInputs(true));
  try {
    run();
  } catch (...) {
    at::removeCallback(handle);
    active = nullptr;
    throw;
  }
  at::removeCallback(handle);
  active = nullptr;
  return counter.flops;
}

}  // namespace hpctrain::model
