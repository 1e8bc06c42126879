// documents.hpp: token documents with a per-token loss flag (instruction, chat and text data), and
// the SequenceSet that lays them out as training sequences.
#pragma once

#include "data/sequences.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zf {

struct Documents {
  std::vector<int32_t> ids;       // every document's tokens, one after another
  std::vector<uint8_t> counted;   // per token: 1 where the loss counts predicting this token
  std::vector<int64_t> start{0};  // document d is tokens [start[d], start[d + 1])

  // Appends one document; counted[i] belongs to tokens[i].
  void add(const std::vector<int64_t> &tokens, const std::vector<uint8_t> &counted);
  int64_t count() const { return int64_t(start.size()) - 1; }
  int64_t length(int64_t d) const { return start[size_t(d) + 1] - start[size_t(d)]; }
};

// One document per sequence: [document, padding] with the inputs cut to seq_len tokens (a
// document of seq_len + 1 tokens gives seq_len predictions) and the padding `pad` with targets
// kIgnoreIndex. A target counts where the token it predicts is counted. `what` starts describe().
std::shared_ptr<const SequenceSet> make_document_sequences(Documents documents, int64_t seq_len, int64_t vocab,
                                                           int64_t pad, std::string what);

// data.packing: the documents of a make_document_sequences set packed several per sequence, best-fit
// decreasing (TRL's "bfd"): each sequence holds whole documents one after another, then padding;
// positions restart at 0 with each document (fill_positions), its last token predicts nothing, and
// a document longer than seq_len keeps its first seq_len tokens (describe() counts them, and the
// share of positions that hold tokens). nullptr when `set` holds no documents.
std::shared_ptr<const SequenceSet> pack_document_sequences(const std::shared_ptr<const SequenceSet> &set);

}  // namespace zf
