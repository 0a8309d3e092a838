#include "activation_checkpoint.h"

#include <ATen/Context.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <optional>

#include "hpctrain/model/autocast.h"

namespace hpctrain::model {
namespace {

// What the second forward needs: the block, and the state the first one ran in.
struct Replay : torch::CustomClassHolder {
  BlockForward block;
  at::Generator generator;  // the input device's default generator
  at::Tensor generator_state;
  std::optional<at::ScalarType> autocast;
};

// The generator holds `state` while this lives, and its own afterwards.
class GeneratorState {
 public:
  GeneratorState(at::Generator generator, const at::Tensor& state) : generator_(std::move(generator)) {
    const std::lock_guard<std::mutex> lock(generator_.mutex());
    own_ = generator_.get_state();
    generator_.set_state(state);
  }
  ~GeneratorState() {
    const std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(own_);
  }
  GeneratorState(const GeneratorState&) = delete;
  GeneratorState& operator=(const GeneratorState&) = delete;

 private:
  at::Generator generator_;
  at::Tensor own_;
};

struct RecomputedBlock : torch::autograd::Function<RecomputedBlock> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const c10::intrusive_ptr<Replay>& replay) {
    ctx->save_for_backward({input});
    ctx->saved_data["replay"] = c10::IValue::make_capsule(replay);
    return replay->block(input);  // autograd records nothing inside a Function's forward
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list output_grads) {
    const auto replay = c10::static_intrusive_pointer_cast<Replay>(ctx->saved_data["replay"].toCapsule());
    const at::Tensor input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor output;
    {
      const torch::AutoGradMode grad(true);
      const GeneratorState replayed(replay->generator, replay->generator_state);
      const AutocastScope autocast(input.device().type(), replay->autocast);
      output = replay->block(input);
    }
    torch::autograd::backward({output}, {output_grads[0]});
    return {input.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor recomputed_in_backward(const at::Tensor& input, BlockForward block) {
  if (!torch::GradMode::is_enabled()) return block(input);
  auto replay = c10::make_intrusive<Replay>();
  replay->block = std::move(block);
  replay->generator = at::globalContext().defaultGenerator(input.device());
  {
    const std::lock_guard<std::mutex> lock(replay->generator.mutex());
    replay->generator_state = replay->generator.get_state();
  }
  replay->autocast = active_autocast(input.device().type());
  // The Function's output needs a gradient only if an input does: an input that needs none
  // (a frozen base's embeddings) is given one, so the block's own parameters still get theirs.
  const at::Tensor tracked = input.requires_grad() ? input : input.detach().requires_grad_(true);
  return RecomputedBlock::apply(tracked, replay);
}

}  // namespace hpctrain::model
