#include "hpctrain/ddp/grad_sync.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>

#include "hpctrain/comm/communicator.h"
#include "hpctrain/core/error.h"

namespace hpctrain::ddp {

GradSync::GradSync(comm::Communicator& comm, std::vector<at::Tensor> parameters)
    : comm_(comm), parameters_(std::move(parameters)) {
  HT_CHECK(!parameters_.empty(), "no parameters to synchronize");
  std::int64_t total = 0;
  for (const auto& p : parameters_) {
    HT_CHECK(p.scalar_type() == parameters_.front().scalar_type(), "mixed parameter dtypes");
    total += p.numel();
  }
  flat_ = at::empty({total}, parameters_.front().options());
}

void GradSync::average_gradients() {
  std::int64_t offset = 0;
  for (auto& p : parameters_) {
    at::Tensor slot = flat_.narrow(0, offset, p.numel());
    if (p.grad().defined()) {
      slot.copy_(p.grad().reshape({-1}));
    } else {
      slot.zero_();
    }
    offset += p.numel();
  }
  comm_.allreduce(flat_, comm::ReduceOp::kAvg)->wait();
  offset = 0;
  for (auto& p : parameters_) {
    at::Tensor averaged = flat_.narrow(0, offset, p.numel()).view(p.sizes());
    if (p.grad().defined()) {
      p.mutable_grad().copy_(averaged);
    } else {
      p.mutable_grad() = averaged.clone();
    }
    offset += p.numel();
  }
}

void broadcast_tensors(comm::Communicator& comm, const std::vector<at::Tensor>& tensors, int root) {
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> flat_views;
    for (const auto& t : group) flat_views.push_back(t.detach().reshape({-1}));
    at::Tensor packed = at::cat(flat_views);
    comm.broadcast(packed, root)->wait();
    std::int64_t offset = 0;
    c10::NoGradGuard no_grad;
    for (auto& t : group) {
      t.detach().copy_(packed.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

std::vector<double> sum_over_ranks(comm::Communicator& comm, const std::vector<double>& values,
                                   c10::Device device) {
  const auto n = static_cast<std::int64_t>(values.size());
  // A copy (also on the CPU), so the collective never writes into `values`.
  at::Tensor sums = at::from_blob(const_cast<double*>(values.data()), {n}, at::kDouble)
                        .to(device, at::kDouble, /*non_blocking=*/false, /*copy=*/true);
  comm.allreduce(sums, comm::ReduceOp::kSum)->wait();
  sums = sums.cpu();
  return {sums.data_ptr<double>(), sums.data_ptr<double>() + n};
}

}  // namespace hpctrain::ddp
