// cpu_adam against torch's own CPU AdamW/Adam in this process (libtorch): the fused ATen kernel
// behind torch.optim.AdamW(fused=True) and the C++ frontend's torch::optim::AdamW, on the same
// random data over 50 steps, on every SIMD path, with fp32 and bf16 gradients and a grad scale.
// torch gets the float-rounded hyperparameters cpu_adam sees, so both run the same math.
//
// Tolerance: |cpu_adam - torch| <= 1e-6 + 1e-5 |torch| on params and moments. torch rounds
// differently (exp_avg as a lerp, the grad scale applied by a separate multiply, no FMA in the
// frontend), a few fp32 ulps per step; the observed worst is ~10x below the bound.
#include <catch2/catch.hpp>

#include "bench/torch_peers.hpp"
#include "optimizer_fixture.hpp"

using namespace zf;
using namespace zf::test;

TEST_CASE("optimizer: cpu_adam agrees with torch's fused AdamW and torch::optim::AdamW",
          "[optimizer]") {
  const uint64_t n = 20011;
  const int steps = 50;
  const zf_optimizer_group group{2e-3f, 0.9f, 0.999f, 1e-8f, 0.05f, {}};
  const float grad_scale = 0.25f;
  for (const std::string &simd : simd_paths()) {
    for (bool decoupled : {true, false}) {
      for (zf_dtype grads_as : {ZF_DTYPE_F32, ZF_DTYPE_BF16}) {
        for (int peer_kind = 0; peer_kind < 2; ++peer_kind) {
          INFO("simd " << simd << ", adam_w_mode " << decoupled << ", grads dtype " << grads_as
                       << (peer_kind == 0 ? ", torch fused" : ", torch::optim"));
          LoadedOptimizer fast("cpu_adam",
                               {{"simd", Value(simd)}, {"adam_w_mode", Value(decoupled)}});
          fast.init_state(n);
          Problem ours(n, grads_as, ZF_DTYPE_BF16), theirs(n, grads_as, ZF_DTYPE_BF16);

          bench::PeerBuffers buffers;
          buffers.params = theirs.params.data();
          buffers.grads = grads_as == ZF_DTYPE_F32
                              ? static_cast<const void *>(theirs.grads.data())
                              : static_cast<const void *>(theirs.grads16.data());
          buffers.grad_dtype = grads_as;
          buffers.params_out = theirs.out_data();
          buffers.out_dtype = ZF_DTYPE_BF16;
          buffers.numel = n;
          buffers.lr = group.lr, buffers.beta1 = group.beta1, buffers.beta2 = group.beta2;
          buffers.eps = group.eps, buffers.weight_decay = group.weight_decay;
          buffers.grad_scale = grad_scale;
          buffers.decoupled = decoupled;
          auto peer = peer_kind == 0 ? bench::make_torch_fused_adamw(buffers)
                                     : bench::make_torch_optim_adamw(buffers);

          for (int t = 1; t <= steps; ++t) {
            ours.new_gradients(t);
            theirs.new_gradients(t);
            fast.step(StepArgs(ours, {{0, n, 0, 0}}, {group}, t, grad_scale).args);
            peer->step(t);
          }
          const std::vector<float> m(peer->exp_avg(), peer->exp_avg() + n);
          const std::vector<float> v(peer->exp_avg_sq(), peer->exp_avg_sq() + n);
          size_t where = 0;
          double ratio = worst_ratio(ours.params, theirs.params, 1e-6, 1e-5, &where);
          INFO("params: worst element " << where << ": " << ours.params[where] << " vs torch "
                                        << theirs.params[where]);
          CHECK(ratio <= 1.0);
          CHECK(worst_ratio(fast.state(0), m, 1e-6, 1e-5) <= 1.0);
          CHECK(worst_ratio(fast.state(1), v, 1e-9, 1e-5) <= 1.0);
          // params_out is the bf16 rounding of params on both sides: one bf16 ulp at most.
          CHECK(worst_ratio(widen(ours.written_out(), ZF_DTYPE_BF16),
                            widen(theirs.written_out(), ZF_DTYPE_BF16), 1e-6, 1.0 / 128) <= 1.0);
          if (getenv("ZF_TEST_VERBOSE")) WARN("params ratio " << ratio);
        }
      }
    }
  }
}
