// generate.hpp: sampling text from a language model after training (the quickstart shows what
// it learned). No KV cache: each new token reruns the model over the last `context` tokens, which
// is plenty for the short samples this is for.
#pragma once

#include "model/model.hpp"
#include "tokenizer/tokenizer.hpp"

#include <functional>
#include <string>

namespace zf {

struct SampleOptions {
  std::string prompt;
  int64_t tokens = 200;
  double temperature = 0.8;  // 0 = greedy
  int64_t top_k = 0;         // 0 = the whole vocabulary
  int64_t context = 128;     // tokens the model sees at most
  uint64_t seed = 0;
};

// The prompt followed by up to options.tokens sampled tokens (stops at EOS, or early when `stop`
// returns true: a signal asked the run to end), as text.
std::string generate(Model &model, const Tokenizer &tokenizer, const SampleOptions &options,
                     const std::function<bool()> &stop = {});

}  // namespace zf
