#include "engine/generate.hpp"

#include "runtime/error.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <limits>

namespace zf {

std::string generate(Model &model, const Tokenizer &tokenizer, const SampleOptions &options,
                     const std::function<bool()> &stop) {
  torch::NoGradGuard no_grad;
  model.train(false);
  std::vector<int64_t> ids = tokenizer.encode(options.prompt);
  if (auto bos = tokenizer.bos_id()) ids.insert(ids.begin(), *bos);
  if (ids.empty()) ids.push_back(tokenizer.eos_id().value_or(0));  // something to start from
  const size_t prompt_length = ids.size();
  auto generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  const size_t blocks = model.block_names().size();
  for (int64_t n = 0; n < options.tokens && !(stop && stop()); ++n) {
    size_t begin = ids.size() > size_t(options.context) ? ids.size() - size_t(options.context) : 0;
    std::vector<int64_t> window(ids.begin() + int64_t(begin), ids.end());
    Batch batch;
    batch.inputs = torch::tensor(window, torch::kInt64).unsqueeze(0);
    torch::Tensor hidden = batch.inputs;
    for (size_t block = 0; block < blocks; ++block) hidden = model.forward_block(block, hidden, batch);
    torch::Tensor logits = hidden.index({0, -1}).to(torch::kFloat32);
    int64_t next;
    if (options.temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      // Shifted by the largest logit, then scaled by 1/temperature (at most 1e30): a tiny temperature
      // (1e-300, 0 as a float) sends the others to -inf and keeps the largest at 0, never 0/0 = NaN.
      logits = (logits - logits.max()) * std::min(1.0 / options.temperature, 1e30);
      if (options.top_k > 0 && options.top_k < logits.size(0)) {
        auto kth = std::get<0>(logits.topk(options.top_k)).index({-1});
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
      }
      next = torch::multinomial(torch::softmax(logits, 0), 1, false, generator).item<int64_t>();
    }
    if (tokenizer.eos_id() && next == *tokenizer.eos_id()) break;
    ids.push_back(next);
  }
  model.train(true);
  std::vector<int64_t> generated(ids.begin() + int64_t(prompt_length), ids.end());
  return options.prompt + tokenizer.decode(generated);
}

}  // namespace zf
