// param_source.hpp: where a model's first parameter values come from (random initialisation, a
// Hugging Face checkpoint, or tensors already in memory), asked for any part of any parameter. A
// model is built without memory for its parameters (their tensors have shapes only); the engine
// then fills just the part of the flat buffers this rank keeps, so under ZeRO-3 no rank ever holds
// (or reads from disk) the whole model.
//
// A part is a rectangle of the parameter in the order the flat buffers store it: W[rows, cols]
// row by row (the matrix `stored` is W), or column by column (stored is W^T, a column-contiguous
// segment); a 1-D parameter is a [numel, 1] matrix. A lookup table [entries, width] is stored
// row by row, whatever the segment tells selectors (ZF_SEGMENT_TRANSPOSED).
#pragma once

#include <torch/torch.h>
#include <zf/zf_plugin.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zf {

struct ModelParameter;

struct StoredRegion {
  bool column_major = false;  // stored is W^T
  int64_t x0 = 0, nx = 0;     // rows of `stored`
  int64_t y0 = 0, ny = 0;     // columns of `stored`
  int64_t numel() const { return nx * ny; }
};

// Elements [begin, end) of a stored matrix with `width` columns, as at most three rectangles (a
// partial first row, whole rows, a partial last row), each with its offset from `begin`.
void for_each_region(int64_t begin, int64_t end, int64_t width, bool column_major,
                     const std::function<void(const StoredRegion &, int64_t offset)> &fn);

// Whether segment's stored matrix is its parameter transposed (a column-contiguous weight; not a
// lookup table, whose stored rows are the model's), as StoredRegion::column_major says it.
bool stored_transposed(const zf_segment &segment);
// The parameter's view (of `sizes`) of `run`, the segment's numel stored elements.
torch::Tensor segment_view(const torch::Tensor &run, const zf_segment &segment, at::IntArrayRef sizes);

// A region of a stack of matrices [E, in, out] (flat_buffers.cpp), stored column by column (a partial row
// or whole rows of W^T = [E x in, out], one run of the stack's memory), as that run of its [numel, 1]:
// every source fills a stack as a vector, whatever the buffers' layout.
StoredRegion stack_run(const StoredRegion &region, int64_t out);
// A parameter's [rows, cols] (a 1-D one, and any other, is [numel, 1]).
std::pair<int64_t, int64_t> matrix_shape(const torch::Tensor &parameter);
// `matrix` (W, [rows, cols]) seen in its stored order, and the region of it.
torch::Tensor stored_part(const torch::Tensor &matrix, const StoredRegion &region);

class ParameterSource {
 public:
  virtual ~ParameterSource() = default;
  // Writes `region` of parameter `index` (the model's parameters() order) into destination: a
  // contiguous CPU tensor of region.numel() elements of the parameter's dtype, row by row of the region.
  virtual void fill(size_t index, const StoredRegion &region, torch::Tensor destination) const = 0;
  // Bytes of stored tensors this source has read so far (a checkpoint's), 0 for values it makes.
  virtual uint64_t bytes_read() const { return 0; }
};

// The values the parameters hold now (a model built with its memory, as linear_stack is).
std::unique_ptr<ParameterSource> current_values(const std::vector<ModelParameter> &parameters);

// Gives every parameter memory of its own (CPU) holding source's values: a model whose
// parameters have shapes only becomes an ordinary one.
void allocate_parameters(const std::vector<ModelParameter> &parameters, const ParameterSource &source);

// A tensor of `sizes` and dtype with no memory behind it (a shape for the layout, bound later to
// flat-buffer views with set_data).
torch::Tensor unallocated_tensor(const std::vector<int64_t> &sizes, torch::Dtype dtype);

}  // namespace zf
