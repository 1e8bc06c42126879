// column_scores.hpp: the per-column scores of topk_l1 / topk_l2 on the GPU.
#pragma once

#include <zf/zf_plugin.h>

namespace topk {

// scores[column] = sum over the column's elements inside args->grads of |g| (squared = false) or
// g * g (squared = true), for the column-contiguous MATRIX segments; enqueued on args->stream.
// Returns a message on failure, NULL on success.
const char *cuda_column_scores(const zf_select_args *args, zf_tensor_view scores, bool squared);

}  // namespace topk
