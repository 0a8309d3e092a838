#include "fake_communicator.h"

#include <ATen/ATen.h>

#include <cstring>
#include <thread>

namespace hpctrain::testing {
namespace {

class DoneWork final : public comm::Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

// Every rank's tensor reduced in rank order: the same sum on every rank.
at::Tensor reduce(const std::vector<at::Tensor>& all, comm::ReduceOp op) {
  at::Tensor sum = all.front().clone();
  for (size_t r = 1; r < all.size(); ++r) sum.add_(all[r]);
  if (op == comm::ReduceOp::kAvg) sum.div_(static_cast<double>(all.size()));
  return sum;
}

}  // namespace

FakeWorld::FakeWorld(int size) : size_(size), arriving_(static_cast<size_t>(size)) {}

std::vector<at::Tensor> FakeWorld::exchange(int rank, const at::Tensor& tensor) {
  std::unique_lock<std::mutex> lock(mutex_);
  arriving_[static_cast<size_t>(rank)] = tensor.defined() ? tensor.detach().clone() : tensor;
  const std::int64_t mine = generation_;
  if (++arrived_ == size_) {
    published_ = std::move(arriving_);
    arriving_.assign(static_cast<size_t>(size_), at::Tensor());
    arrived_ = 0;
    ++generation_;
    all_arrived_.notify_all();
  } else {
    all_arrived_.wait(lock, [&] { return generation_ != mine; });
  }
  // published_ stays until the next exchange completes, which needs this rank to arrive first.
  return published_;
}

std::unique_ptr<comm::Work> FakeCommunicator::allreduce(at::Tensor& tensor, comm::ReduceOp op) {
  ++allreduces;
  last_dtype = tensor.scalar_type();
  tensor.copy_(reduce(world_.exchange(rank_, tensor), op));
  return std::make_unique<DoneWork>();
}

std::unique_ptr<comm::Work> FakeCommunicator::broadcast(at::Tensor& tensor, int root) {
  tensor.copy_(world_.exchange(rank_, tensor)[static_cast<size_t>(root)]);
  return std::make_unique<DoneWork>();
}

std::unique_ptr<comm::Work> FakeCommunicator::allgather(const at::Tensor& input, at::Tensor& output) {
  output.copy_(at::cat(world_.exchange(rank_, input.flatten())).view_as(output));
  return std::make_unique<DoneWork>();
}

std::unique_ptr<comm::Work> FakeCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                                             comm::ReduceOp op) {
  const at::Tensor sum = reduce(world_.exchange(rank_, input.flatten()), op);
  output.copy_(sum.chunk(world_.size())[static_cast<size_t>(rank_)].view_as(output));
  return std::make_unique<DoneWork>();
}

void FakeCommunicator::barrier() { world_.exchange(rank_, at::Tensor()); }
void FakeCommunicator::barrier() const { world_.exchange(rank_, at::Tensor()); }

void FakeCommunicator::broadcast_bytes(std::vector<std::uint8_t>& bytes, int root) const {
  const at::Tensor mine = at::from_blob(bytes.data(), {static_cast<std::int64_t>(bytes.size())}, at::kByte);
  const at::Tensor theirs = world_.exchange(rank_, mine)[static_cast<size_t>(root)];
  bytes.assign(theirs.data_ptr<std::uint8_t>(), theirs.data_ptr<std::uint8_t>() + theirs.numel());
}

std::vector<std::string> FakeCommunicator::allgather_string(const std::string& value) const {
  std::vector<std::uint8_t> bytes(value.begin(), value.end());
  const at::Tensor mine = at::from_blob(bytes.data(), {static_cast<std::int64_t>(bytes.size())}, at::kByte);
  std::vector<std::string> all;
  for (const at::Tensor& t : world_.exchange(rank_, mine)) {
    all.emplace_back(reinterpret_cast<const char*>(t.data_ptr<std::uint8_t>()), static_cast<size_t>(t.numel()));
  }
  return all;
}

void FakeCommunicator::allreduce_sum(float* values, std::int64_t count) const {
  const at::Tensor mine = at::from_blob(values, {count}, at::kFloat);
  const at::Tensor sum = reduce(world_.exchange(rank_, mine), comm::ReduceOp::kSum);
  std::memcpy(values, sum.data_ptr<float>(), static_cast<size_t>(count) * sizeof(float));
}

void run_ranks(FakeWorld& world, const std::function<void(FakeCommunicator&)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size(); ++r) {
    threads.emplace_back([&world, &body, r] {
      FakeCommunicator comm(world, r);
      body(comm);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace hpctrain::testing
