#include "update/clip_speculation.hpp"

#include "runtime/error.hpp"
#include "runtime/tensors.hpp"

namespace zf {

bool ClipSpeculation::applies(const UpdateBuffers &buffers) {
  return buffers.offloaded && !buffers.disk && buffers.tiers.param_tier == buffers.model_tier &&
         !buffers.state_specs.empty();
}

ClipSpeculation::ClipSpeculation(UpdateBuffers &buffers, uint64_t from) : buffers_(buffers), from_(from) {}

std::vector<std::string> ClipSpeculation::tags() const {
  std::vector<std::string> out = {"clip speculation (master)"};
  for (const StateSpec &spec : buffers_.state_specs) out.push_back(format("clip speculation (%s)", spec.name.c_str()));
  return out;
}

// Pageable host memory (only the update thread reads and writes it), or on a CPU run, where that is
// the memory the model computes in, the master's tier: device_memory_limit_gb is not charged for it.
zf_tier ClipSpeculation::tier() const {
  return buffers_.model_tier == ZF_TIER_HOST ? buffers_.tiers.master_tier : ZF_TIER_HOST;
}

void ClipSpeculation::add_planned(std::vector<PlannedBuffer> &planned) const {
  const uint64_t n = buffers_.numel() - from_;
  const std::vector<std::string> names = tags();
  planned.push_back({tier(), names[0], n * 4});
  for (size_t i = 0; i < buffers_.state_specs.size(); ++i)
    planned.push_back({tier(), names[1 + i], n * c10::elementSize(buffers_.state_specs[i].dtype)});
}

uint64_t ClipSpeculation::bytes() const {
  std::vector<PlannedBuffer> planned;
  add_planned(planned);
  uint64_t total = 0;
  for (const PlannedBuffer &b : planned) total += b.bytes;
  return total;
}

void ClipSpeculation::allocate() {
  const uint64_t n = buffers_.numel() - from_;
  const std::vector<std::string> names = tags();
  MemoryLedger &ledger = buffers_.runtime.memory;
  copies_ = {ledger_tensor(ledger, tier(), n, torch::kFloat32, names[0], /*zero=*/false)};
  for (size_t i = 0; i < buffers_.state_specs.size(); ++i)
    copies_.push_back(ledger_tensor(ledger, tier(), n, buffers_.state_specs[i].dtype, names[1 + i], false));
}

void ClipSpeculation::keep(uint64_t begin, uint64_t end) { copy(begin, end, /*back=*/false); }
void ClipSpeculation::restore(uint64_t begin, uint64_t end) { copy(begin, end, /*back=*/true); }

void ClipSpeculation::copy(uint64_t begin, uint64_t end, bool back) {
  ZF_REQUIRE(from_ <= begin && begin <= end && end <= buffers_.numel() && !copies_.empty(),
           "clip speculation: shard elements [%llu, %llu) outside its copy [%llu, %llu)", (unsigned long long)begin,
           (unsigned long long)end, (unsigned long long)from_, (unsigned long long)buffers_.numel());
  Timers &timers = buffers_.runtime.timers;
  const uint32_t timer = timers.id(back ? "clip_redo" : "clip_speculation_copy");
  timers.start(timer);
  torch::NoGradGuard no_grad;
  const int64_t length = int64_t(end - begin);
  for (size_t i = 0; i < copies_.size(); ++i) {
    torch::Tensor live = (i == 0 ? buffers_.master : buffers_.state[i - 1]).narrow(0, int64_t(begin), length);
    torch::Tensor kept = copies_[i].narrow(0, int64_t(begin - from_), length);
    if (back) live.copy_(kept);
    else kept.copy_(live);
  }
  timers.stop(timer);
}

}  // namespace zf
