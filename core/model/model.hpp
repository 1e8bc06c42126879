// model.hpp: the interface between the engine and a model of the zoo. A model is a sequence of
// blocks the engine runs one by one (so a stage plugin can gather a block's parameters before its
// forward and backward and release them after), followed by a loss.
//
// Data flow of one micro-step:   hidden = batch.inputs
//   for b in blocks but the last: stage.before_forward(b); hidden = model.forward_block(b, hidden, batch); ...
//   loss = model.forward_loss(hidden, batch) (the last block's hooks around it); loss.backward()
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zf {

// Several documents in each row (data.packing): every document attends only to itself, its
// positions restart at 0 (RoPE, learned positions) and recurrent layers start it from a fresh state.
// Undefined: one sequence per row, at positions 0..T-1.
struct PackedDocuments {
  torch::Tensor positions;  // [B, T] int64: each input's position in its document; every row starts at 0
  torch::Tensor starts;     // [documents + 1] int32: document d is inputs [starts[d], starts[d + 1]) of the
                            // flattened B*T (variable-length attention's cu_seqlens); the last is B*T
  int64_t longest = 0;      // inputs of the longest document
  bool defined() const { return positions.defined(); }
};

// The documents of positions [B, T]: one starts wherever a position is 0.
inline PackedDocuments packed_documents(const torch::Tensor &positions) {
  torch::Tensor flat = positions.reshape({-1});
  torch::Tensor starts = torch::cat({torch::nonzero(flat == 0).reshape({-1}),
                                     torch::full({1}, flat.numel(), flat.options())});
  const int64_t documents = starts.numel() - 1;
  const int64_t longest =
      documents > 0 ? (starts.narrow(0, 1, documents) - starts.narrow(0, 0, documents)).max().item<int64_t>() : 0;
  return PackedDocuments{positions, starts.to(torch::kInt32), longest};
}

struct Batch {
  torch::Tensor inputs;   // token ids [B, T] (int64) or features [B, H] (linear_stack)
  torch::Tensor targets;  // same shape as the ids; int64; kIgnoreIndex where the loss does not
                          // count (padding, instruction prompts, a document's last token when packed)
  PackedDocuments packed; // packed data only
  int64_t samples = 0;
  int64_t tokens = 0;     // tokens that count toward throughput
};

// Target value the loss skips (the Hugging Face / torch convention).
constexpr int64_t kIgnoreIndex = -100;

struct ModelParameter {
  std::string name;      // Hugging Face-style name where one exists ("transformer.h.0.attn.c_attn.weight")
  torch::Tensor tensor;  // the module's parameter (the engine re-points it into the flat buffer)
  uint32_t block = 0;    // index into block_names()
  bool matrix = false;   // a 2-D weight W[out, in] eligible for column storage and selection
  bool no_decay = false; // bias, norm, embedding-free 1-D parameters
  // A lookup table [entries, width] (token or position embedding): its rows, not its columns, are
  // what ZenFlow chooses among (flat_buffers.hpp describes it to selectors as a matrix of entries).
  bool table = false;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string name() const = 0;
  virtual std::vector<std::string> block_names() const = 0;
  // All trainable parameters, grouped by block in block order; stable across calls.
  virtual std::vector<ModelParameter> parameters() = 0;
  // Runs block `block` on the previous block's output (block 0 receives batch.inputs). The last
  // block of a language model returns logits [B, T, vocab].
  virtual torch::Tensor forward_block(size_t block, const torch::Tensor &hidden,
                                      const Batch &batch) = 0;
  // Scalar mean loss over the counted positions of the micro-batch.
  virtual torch::Tensor loss(const torch::Tensor &output, const Batch &batch) = 0;
  // The last block and the loss together, from the previous block's output: what training and
  // evaluation call. A model may compute it without materialising the last block's output whole.
  virtual torch::Tensor forward_loss(const torch::Tensor &hidden, const Batch &batch) {
    return loss(forward_block(block_names().size() - 1, hidden, batch), batch);
  }
  virtual void train(bool on) = 0;
  // The mixture-of-experts load-balancing loss of the last loss() call, unscaled (moe.hpp), for the
  // logs; NaN for a model without experts.
  virtual double aux_loss() const { return std::nan(""); }
  // Other blocks whose parameters forward_block(block) also reads (a tied output head reads the
  // embedding block); a stage that shards parameters gathers them too.
  virtual std::vector<size_t> tied_blocks(size_t /*block*/) const { return {}; }
};

}  // namespace zf
