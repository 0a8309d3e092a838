// The key under which torch::optim keeps a parameter's state: the TensorImpl's address, printed
// in libtorch 1.x, the pointer itself in 2.x. Private to the optim module.
#pragma once

#include <ATen/core/Tensor.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace hpctrain::optim {

template <typename Map>
typename Map::key_type optimizer_state_key(const Map&, const at::Tensor& parameter) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << parameter.unsafeGetTensorImpl();
    return text.str();
  } else {
    return static_cast<Key>(parameter.unsafeGetTensorImpl());
  }
}

}  // namespace hpctrain::optim
