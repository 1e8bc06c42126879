// gemma4_layout.hpp: where Gemma 4's layers differ from one another (Gemma4Spec of
// decoder_features.hpp), from the shape alone: each layer's head size and key-value heads, whether it
// computes its own keys and values or reuses an earlier layer's, its MLP width, and the parameters
// all of that makes. No libtorch here (the model itself: gemma4.cpp).
#pragma once

#include "model/transformer_shape.hpp"

#include <cstdint>

namespace zf {

// A full-attention layer has global_head_dim and global_kv_heads where they are set; a sliding one
// the shape's head_dim and kv_heads.
int64_t gemma4_head_dim(const TransformerShape &s, int64_t layer);
int64_t gemma4_kv_heads(const TransformerShape &s, int64_t layer);
// Its values are its keys' projection (attention_k_eq_v, full-attention layers only): no v_proj.
bool gemma4_values_are_keys(const TransformerShape &s, int64_t layer);
// The first of the last num_kv_shared_layers layers, which compute queries only.
int64_t gemma4_first_shared(const TransformerShape &s);
// The layer whose keys and values layer `layer` attends over: itself, or for a shared layer the last
// layer of its type before the shared ones; -1 where there is none (validate refuses that shape).
int64_t gemma4_kv_source(const TransformerShape &s, int64_t layer);
int64_t gemma4_mlp_width(const TransformerShape &s, int64_t layer);
// The channels that pass from block to block: the hidden state, every layer's per-layer input, and the
// keys and values of each layer that later layers reuse.
int64_t gemma4_stream_width(const TransformerShape &s);
// Every parameter the model registers (gemma4.cpp): the layer scalars, fixed, counted among them; with
// `active`, only the top k of each layer's experts.
uint64_t gemma4_parameter_count(const TransformerShape &s, bool active = false);
// Throws zf::Error naming `where` for a Gemma 4 shape the model cannot build.
void gemma4_validate(const TransformerShape &s, const char *where);

}  // namespace zf
