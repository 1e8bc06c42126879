#include "model/fused_experts.hpp"

#include <cctype>

namespace zf {

FusedSlice fused_expert_slice(const TransformerShape &s, const std::string &name) {
  const MoeSpec &m = s.features.moe;
  const std::string marker = "mlp.experts.";
  const size_t at = name.find(marker);
  if (!m.fused_experts || at == std::string::npos) return {};
  const size_t digits = at + marker.size();
  size_t end = digits;
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == digits || end >= name.size() || name[end] != '.') return {};
  const int64_t expert = std::stoll(name.substr(digits, end - digits));
  const std::string which = name.substr(end + 1), prefix = name.substr(0, digits);
  const int64_t h = s.hidden, inner = m.expert_intermediate;
  if (which == "gate_proj.weight" || which == "up_proj.weight")
    return {prefix + "gate_up_proj", {m.experts, 2 * inner, h}, expert, which == "up_proj.weight" ? inner : 0};
  if (which == "down_proj.weight") return {prefix + "down_proj", {m.experts, h, inner}, expert, 0};
  return {};
}

}  // namespace zf
