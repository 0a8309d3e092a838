// Which parameters share a gradient bucket: a pure function of the parameters' sizes and the cap,
// so every rank derives the same plan and issues the same collectives in the same order.
// Depends on std only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hpctrain::ddp {

struct Bucket {
  std::vector<std::size_t> parameters;  // indices into the parameter list, in their order in the bucket
  std::int64_t numel = 0;
};

// Buckets filled in reverse parameter order (backward produces the last layers' gradients first),
// each holding up to `cap_elements` elements; a parameter larger than the cap gets a bucket of its
// own. Bucket 0 is reduced first.
std::vector<Bucket> plan_buckets(const std::vector<std::int64_t>& numels, std::int64_t cap_elements);

}  // namespace hpctrain::ddp
