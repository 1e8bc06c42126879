// The [data] table of the config. docs/data.md describes the sources.
#include "config/limits.hpp"

namespace zf {

std::vector<zf_param_decl> data_schema() {
  return {
      decl("type", ZF_PARAM_STRING, "random", "data source", 0, 0, 0, "random|synthetic|tokens|text|alpaca|chat|prompt_completion|documents"),
      decl("path", ZF_PARAM_STRING, "",
           "tokens, documents: a .bin shard, a directory of them or a glob; text: a text file, or JSON Lines, JSON or "
           "Parquet documents ({\"text\": ...}); alpaca: a JSON file; chat ({\"messages\": [...]}), prompt_completion "
           "({\"prompt\": ..., \"completion\": ...}): JSON Lines, JSON or Parquet"),
      decl("seq_len", ZF_PARAM_INT, "1024", "input tokens per sequence; a sequence reads seq_len + 1 ids (HF block size = seq_len + 1)", kRange, 1, kMaxSeqLen),
      decl("tokenizer", ZF_PARAM_STRING, "byte", "text and alpaca: byte (built in), hf (tokenizer.json) or sentencepiece",
           0, 0, 0, "byte|hf|sentencepiece"),
      decl("tokenizer_path", ZF_PARAM_STRING, "", "tokenizer.json or tokenizer.model, or the directory holding it"),
      decl("vocab", ZF_PARAM_INT, "0",
           "vocabulary size: synthetic draws ids below it (required); tokens, text, alpaca check ids against it (0: off)",
           kRange, 0, kMaxVocab),
      decl("samples", ZF_PARAM_INT, "256", "random and synthetic: number of examples", kRange, 1, double(int64_t(1) << 32)),
      decl("eval_fraction", ZF_PARAM_FLOAT, "0.0", "share of the sequences held out for evaluation", kUnitOpen, 0, 1),
      decl("eval_path", ZF_PARAM_STRING, "",
           "tokens, text, alpaca: a separate file evaluated on (all of it, read as data.path is) instead of a held-out "
           "share"),
      decl("chat_template", ZF_PARAM_STRING, "",
           "chat: a Jinja file rendered instead of the tokenizer's chat template (and exported with the model)"),
      decl("prepared_dir", ZF_PARAM_STRING, "",
           "chat, prompt_completion, JSON text: where prepared token shards are kept (empty: "
           "$XDG_CACHE_HOME/zfcore/prepared, else ~/.cache/zfcore/prepared)"),
      decl("shuffle", ZF_PARAM_BOOL, "true", "reorder the training sequences every epoch (seeded by run.seed and the epoch)"),
      decl("packing", ZF_PARAM_BOOL, "false",
           "alpaca, chat, prompt_completion, documents, JSON text: several documents per sequence (best-fit "
           "decreasing), each attending only to itself, its positions restarting at 0; false: one per sequence, "
           "padded")};
}

}  // namespace zf
