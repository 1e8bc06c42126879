#include "model/fused_experts.hpp"

#include <cctype>

namespace zf {

FusedSlice fused_expert_slice(const TransformerShape &s, const std::string &name) {
  const MoeSpec &m = s.features.moe;
  const Gemma4Spec &g = s.features.gemma4;
  // Qwen3.5-MoE's mlp.experts.*, Gemma 4's experts.* (beside its dense mlp).
  const bool gemma4 = g.experts > 0;
  if (!m.fused_experts && !gemma4) return {};
  const std::string marker = gemma4 ? ".experts." : "mlp.experts.";
  const int64_t experts = gemma4 ? g.experts : m.experts;
  const int64_t inner = gemma4 ? g.expert_intermediate : m.expert_intermediate;
  const size_t at = name.find(marker);
  if (at == std::string::npos) return {};
  const size_t digits = at + marker.size();
  size_t end = digits;
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == digits || end >= name.size() || name[end] != '.') return {};
  const int64_t expert = std::stoll(name.substr(digits, end - digits));
  const std::string which = name.substr(end + 1), prefix = name.substr(0, digits);
  const int64_t h = s.hidden;
  if (which == "gate_proj.weight" || which == "up_proj.weight")
    return {prefix + "gate_up_proj", {experts, 2 * inner, h}, expert, which == "up_proj.weight" ? inner : 0};
  if (which == "down_proj.weight") return {prefix + "down_proj", {experts, h, inner}, expert, 0};
  return {};
}

}  // namespace zf
