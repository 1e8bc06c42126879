#include "model/moe.hpp"

#include "runtime/error.hpp"

#include <cmath>
#include <limits>
#include <map>

namespace zf {

struct RouterStats::State {
  MoeSpec spec;
  std::map<int64_t, torch::Tensor> counts, sums;  // per sparse layer: top-k picks and summed probabilities [E]
  std::map<int64_t, int64_t> rows;
  torch::Tensor total_counts;  // frozen by add_to for the backward
  double total_rows = 0;
  torch::Tensor grad_coeff;    // d(loss) / d(probability of expert e), the same for every row; set by the backward
  torch::Tensor aux;           // unscaled, detached
};

namespace {

using State = RouterStats::State;

int64_t pointer_of(State *state) { return int64_t(reinterpret_cast<intptr_t>(state)); }
State *state_of(torch::autograd::AutogradContext *ctx) {
  return reinterpret_cast<State *>(intptr_t(ctx->saved_data["state"].toInt()));
}

// The loss's node: its backward is the first to run, and leaves the gradient every sparse layer's
// probabilities receive from coef * aux: coef * E * f_e / rows, times the loss's own gradient.
struct AuxRoot : torch::autograd::Function<AuxRoot> {
  static torch::Tensor forward(torch::autograd::AutogradContext *ctx, const torch::Tensor &loss, int64_t state,
                               const torch::Tensor &scaled_aux) {
    ctx->saved_data["state"] = state;
    return loss + scaled_aux.to(loss.scalar_type());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    State *s = state_of(ctx);
    const double factor = s->spec.aux_coef * double(s->spec.experts) / (s->total_rows * s->total_rows);
    s->grad_coeff = s->total_counts * factor * grads[0].to(torch::kFloat32);
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

// A sparse layer's probabilities, unchanged forward; the backward adds the load-balancing loss's
// gradient, inside the layer's own backward.
struct AuxTap : torch::autograd::Function<AuxTap> {
  static torch::Tensor forward(torch::autograd::AutogradContext *ctx, const torch::Tensor &probs, int64_t state) {
    ctx->saved_data["state"] = state;
    ctx->saved_data["rows"] = probs.size(0);
    return probs.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::Tensor &coeff = state_of(ctx)->grad_coeff;
    torch::Tensor grad = grads[0];
    if (coeff.defined()) {
      torch::Tensor aux = coeff.unsqueeze(0).expand({ctx->saved_data["rows"].toInt(), coeff.size(0)});
      grad = grad.defined() ? grad + aux : aux.contiguous();
    }
    return {grad, torch::Tensor()};
  }
};

torch::Tensor stack_transposed(const std::vector<torch::Tensor> &weights) {
  std::vector<torch::Tensor> t;
  t.reserve(weights.size());
  for (const torch::Tensor &w : weights) t.push_back(w.t());
  return torch::stack(t);  // [E, in, out]
}

// The gated activation of the experts: SwiGLU, or GeGLU with tanh's GELU (Gemma 4).
torch::Tensor glu(const torch::Tensor &gate, const torch::Tensor &up, bool gelu) {
  return (gelu ? torch::gelu(gate, "tanh") : torch::silu(gate)) * up;
}

// The experts on rows sorted by expert, `counts` rows each: three grouped GEMMs.
torch::Tensor grouped_experts(const MoeWeights &w, const torch::Tensor &rows, const torch::Tensor &counts, bool gelu) {
  const torch::Tensor offsets = counts.cumsum(0).to(torch::kInt32);
  torch::Tensor gate = at::_grouped_mm(rows, stack_transposed(w.gate), offsets);
  torch::Tensor up = at::_grouped_mm(rows, stack_transposed(w.up), offsets);
  return at::_grouped_mm(glu(gate, up, gelu), stack_transposed(w.down), offsets);
}

// The same, one expert at a time (an expert without rows multiplies an empty block: a zero gradient).
torch::Tensor looped_experts(const MoeWeights &w, const torch::Tensor &rows, const torch::Tensor &counts, bool gelu) {
  const torch::Tensor host = counts.to(torch::kCPU, torch::kLong);
  const int64_t *count = host.data_ptr<int64_t>();
  std::vector<torch::Tensor> outputs;
  int64_t start = 0;
  for (size_t e = 0; e < w.gate.size(); ++e) {
    torch::Tensor x = rows.narrow(0, start, count[e]);
    start += count[e];
    outputs.push_back(torch::linear(glu(torch::linear(x, w.gate[e]), torch::linear(x, w.up[e]), gelu), w.down[e]));
  }
  return torch::cat(outputs);
}

// gpt-oss's clamped SwiGLU on [rows, 2 inner] with gate and up interleaved.
torch::Tensor clamped_swiglu(const MoeSpec &spec, const torch::Tensor &gate_up) {
  torch::Tensor gate = gate_up.slice(-1, 0, gate_up.size(-1), 2).clamp_max(spec.swiglu_limit);
  torch::Tensor up = gate_up.slice(-1, 1, gate_up.size(-1), 2).clamp(-spec.swiglu_limit, spec.swiglu_limit);
  return (up + 1) * (gate * torch::sigmoid(gate * spec.swiglu_alpha));
}

// gpt-oss's fused experts on rows sorted by expert (`experts`: each row's expert): two grouped GEMMs
// over the 3-D tensors as they are stored ([E, in, out]), each row adding its expert's bias; or one
// expert at a time.
torch::Tensor fused_experts(const MoeSpec &spec, const MoeWeights &w, const torch::Tensor &rows,
                            const torch::Tensor &counts, const torch::Tensor &experts, bool grouped) {
  if (grouped) {
    const torch::Tensor offsets = counts.cumsum(0).to(torch::kInt32);
    torch::Tensor gate_up = at::_grouped_mm(rows, w.gate_up, offsets) + w.gate_up_bias.index_select(0, experts);
    return at::_grouped_mm(clamped_swiglu(spec, gate_up), w.fused_down, offsets) + w.down_bias.index_select(0, experts);
  }
  const torch::Tensor host = counts.to(torch::kCPU, torch::kLong);
  const int64_t *count = host.data_ptr<int64_t>();
  std::vector<torch::Tensor> outputs;
  int64_t start = 0;
  for (int64_t e = 0; e < spec.experts; ++e) {
    torch::Tensor x = rows.narrow(0, start, count[e]);
    start += count[e];
    torch::Tensor hidden = clamped_swiglu(spec, torch::matmul(x, w.gate_up[e]) + w.gate_up_bias[e]);
    outputs.push_back(torch::matmul(hidden, w.fused_down[e]) + w.down_bias[e]);
  }
  return torch::cat(outputs);
}

}  // namespace

std::string moe_router_name(const MoeSpec &spec, const std::string &p) {
  if (spec.fused()) return p + "mlp.router.weight";
  return p + (spec.mixtral_names ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
}

std::string moe_router_bias_name(const std::string &p) { return p + "mlp.router.bias"; }
std::string moe_fused_name(const std::string &p, const char *which) { return p + "mlp.experts." + which; }

std::string moe_expert_name(const MoeSpec &spec, const std::string &p, int64_t e, const char *which) {
  const std::string which_s = which;
  if (spec.mixtral_names)
    return p + "block_sparse_moe.experts." + std::to_string(e) + "." +
           (which_s == "gate" ? "w1" : which_s == "up" ? "w3" : "w2") + ".weight";
  return p + "mlp.experts." + std::to_string(e) + "." + which_s + "_proj.weight";
}

RouterStats::RouterStats() : state_(std::make_unique<State>()) {}
RouterStats::~RouterStats() = default;

void RouterStats::reset(const MoeSpec &spec) {
  *state_ = State{};
  state_->spec = spec;
}

torch::Tensor RouterStats::track(int64_t layer, const torch::Tensor &probs, const torch::Tensor &picks) {
  State &s = *state_;
  torch::Tensor flat = picks.reshape({-1});
  s.counts[layer] = torch::zeros({s.spec.experts}, probs.options().requires_grad(false))
                        .scatter_add_(0, flat, torch::ones({flat.size(0)}, probs.options().requires_grad(false)));
  s.sums[layer] = probs.detach().sum(0);
  s.rows[layer] = probs.size(0);
  if (s.spec.aux_loss && probs.requires_grad()) return AuxTap::apply(probs, pointer_of(state_.get()));
  return probs;
}

torch::Tensor RouterStats::add_to(const torch::Tensor &loss) {
  State &s = *state_;
  if (s.counts.empty()) return loss;
  torch::Tensor counts = torch::zeros_like(s.counts.begin()->second), sums = torch::zeros_like(counts);
  double rows = 0;
  for (const auto &[layer, c] : s.counts) {
    counts = counts + c;
    sums = sums + s.sums[layer];
    rows += double(s.rows[layer]);
  }
  s.total_counts = counts;
  s.total_rows = rows;
  s.aux = ((counts / rows) * (sums / rows)).sum() * double(s.spec.experts);
  if (!s.spec.aux_loss) return loss;
  return AuxRoot::apply(loss, pointer_of(state_.get()), s.aux.to(loss.device()) * s.spec.aux_coef);
}

double RouterStats::last_aux() const {
  return state_->aux.defined() ? state_->aux.item<double>() : std::numeric_limits<double>::quiet_NaN();
}

bool moe_grouped_by_default(const torch::Tensor &x, const MoeSpec &spec) {
  const int64_t h = x.size(-1);
  return x.is_cuda() && x.scalar_type() == torch::kBFloat16 && h % 8 == 0 && spec.expert_intermediate % 8 == 0;
}

torch::Tensor moe_mlp(const MoeSpec &spec, const MoeWeights &w, const torch::Tensor &x, RouterStats *stats,
                      int64_t layer, bool grouped) {
  const int64_t h = x.size(-1), k = spec.top_k;
  torch::Tensor tokens = x.reshape({-1, h});
  torch::Tensor probs = torch::softmax(torch::linear(tokens, w.router, w.router_bias), -1, torch::kFloat32);
  torch::Tensor picks = std::get<1>(probs.detach().topk(k, -1, /*largest=*/true, /*sorted=*/true));  // [n, k]
  if (stats) probs = stats->track(layer, probs, picks);
  torch::Tensor weights = probs.gather(1, picks);  // [n, k], fp32
  if (spec.norm_topk) weights = weights / weights.sum(-1, true);
  return routed_experts(spec, w, tokens, picks, weights, false, grouped).view(x.sizes());
}

torch::Tensor routed_experts(const MoeSpec &spec, const MoeWeights &w, const torch::Tensor &tokens,
                             const torch::Tensor &picks, const torch::Tensor &weights, bool gelu, bool grouped) {
  const int64_t n = tokens.size(0), h = tokens.size(1), k = picks.size(1);
  // Rows sorted by expert (stable: in token order within an expert), and where each came from.
  torch::Tensor experts = picks.reshape({-1});
  torch::Tensor order = experts.argsort(/*stable=*/true);
  torch::Tensor counts = torch::zeros({spec.experts}, experts.options())
                             .scatter_add_(0, experts, torch::ones_like(experts));
  torch::Tensor rows = tokens.index_select(0, order.div(k, "floor"));
  torch::Tensor out = spec.fused()  ? fused_experts(spec, w, rows, counts, experts.index_select(0, order), grouped)
                      : grouped     ? grouped_experts(w, rows, counts, gelu)
                                    : looped_experts(w, rows, counts, gelu);
  out = out.to(torch::kFloat32) * weights.reshape({-1}).index_select(0, order).unsqueeze(1);
  // Back to token order (the inverse permutation), then each token's k outputs summed in fp32.
  torch::Tensor inverse = torch::empty_like(order).scatter_(0, order, torch::arange(n * k, order.options()));
  out = out.index_select(0, inverse).view({n, k, h}).sum(1);
  return out.to(tokens.scalar_type());
}

}  // namespace zf
