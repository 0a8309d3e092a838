#include "hpctrain/ddp/bucket_plan.h"

#include "hpctrain/core/error.h"

namespace hpctrain::ddp {

std::vector<Bucket> plan_buckets(const std::vector<std::int64_t>& numels, std::int64_t cap_elements) {
  HT_CHECK(cap_elements > 0, "bucket cap must be positive");
  std::vector<Bucket> buckets;
  for (size_t k = numels.size(); k-- > 0;) {
    const bool full = !buckets.empty() && buckets.back().numel > 0 &&
                      buckets.back().numel + numels[k] > cap_elements;
    if (buckets.empty() || full) buckets.emplace_back();
    buckets.back().parameters.push_back(k);
    buckets.back().numel += numels[k];
  }
  return buckets;
}

}  // namespace hpctrain::ddp
