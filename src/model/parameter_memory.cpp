#include "hpctrain/model/parameter_memory.h"

#include <c10/core/StorageImpl.h>

namespace hpctrain::model {

void release_memory(const at::Tensor& tensor) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, tensor.device()));
  storage->set_nbytes(0);
}

bool lacks_memory(const at::Tensor& tensor) { return tensor.numel() > 0 && tensor.storage().nbytes() == 0; }

}  // namespace hpctrain::model
