#include "model/param_source.hpp"

#include "model/model.hpp"
#include "runtime/error.hpp"

namespace zf {

void for_each_region(int64_t begin, int64_t end, int64_t width, bool column_major,
                     const std::function<void(const StoredRegion &, int64_t offset)> &fn) {
  if (end <= begin) return;
  int64_t row = begin / width, column = begin % width;
  const int64_t last_row = (end - 1) / width, last_column = (end - 1) % width;
  if (row == last_row) {
    fn(StoredRegion{column_major, row, 1, column, last_column - column + 1}, 0);
    return;
  }
  int64_t offset = 0;
  if (column > 0) {  // a partial first row
    fn(StoredRegion{column_major, row, 1, column, width - column}, 0);
    offset = width - column;
    ++row;
  }
  const int64_t whole_rows = last_row - row + (last_column + 1 == width ? 1 : 0);
  if (whole_rows > 0) fn(StoredRegion{column_major, row, whole_rows, 0, width}, offset);
  offset += whole_rows * width;
  if (last_column + 1 < width) fn(StoredRegion{column_major, last_row, 1, 0, last_column + 1}, offset);
}

bool stored_transposed(const zf_segment &segment) {
  return (segment.flags & ZF_SEGMENT_COLUMN_CONTIGUOUS) && !(segment.flags & ZF_SEGMENT_TRANSPOSED);
}

torch::Tensor segment_view(const torch::Tensor &run, const zf_segment &segment, at::IntArrayRef sizes) {
  if (sizes.size() == 3) return run.view(sizes);  // a stack of matrices lies as it is (flat_buffers.cpp)
  if (stored_transposed(segment)) return run.view({int64_t(segment.cols), int64_t(segment.rows)}).t();
  return run.view(sizes);
}

StoredRegion stack_run(const StoredRegion &region, int64_t out) {
  if (!region.column_major) return region;
  return StoredRegion{false, region.x0 * out + region.y0, region.numel(), 0, 1};
}

std::pair<int64_t, int64_t> matrix_shape(const torch::Tensor &parameter) {
  if (parameter.dim() == 2) return {parameter.size(0), parameter.size(1)};
  return {parameter.numel(), 1};
}

torch::Tensor stored_part(const torch::Tensor &matrix, const StoredRegion &region) {
  torch::Tensor stored = region.column_major ? matrix.t() : matrix;
  return stored.narrow(0, region.x0, region.nx).narrow(1, region.y0, region.ny);
}

namespace {

class CurrentValues final : public ParameterSource {
 public:
  explicit CurrentValues(std::vector<torch::Tensor> tensors) : tensors_(std::move(tensors)) {}
  void fill(size_t index, const StoredRegion &region, torch::Tensor destination) const override {
    const torch::Tensor &value = tensors_.at(index);
    const auto [rows, cols] = matrix_shape(value);
    torch::NoGradGuard no_grad;
    const StoredRegion part = value.dim() == 3 ? stack_run(region, value.size(2)) : region;
    destination.view({part.nx, part.ny}).copy_(stored_part(value.detach().reshape({rows, cols}), part));
  }

 private:
  std::vector<torch::Tensor> tensors_;
};

}  // namespace

std::unique_ptr<ParameterSource> current_values(const std::vector<ModelParameter> &parameters) {
  std::vector<torch::Tensor> tensors;
  for (const ModelParameter &p : parameters) tensors.push_back(p.tensor);
  return std::make_unique<CurrentValues>(std::move(tensors));
}

void allocate_parameters(const std::vector<ModelParameter> &parameters, const ParameterSource &source) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const torch::Tensor &tensor = parameters[i].tensor;
    torch::Tensor value = torch::empty(tensor.sizes(), torch::TensorOptions().dtype(tensor.scalar_type()));
    const auto [rows, cols] = matrix_shape(tensor);
    if (value.numel() > 0) source.fill(i, StoredRegion{false, 0, rows, 0, cols}, value.view({-1}));
    torch::Tensor(tensor).set_data(value);
  }
}

torch::Tensor unallocated_tensor(const std::vector<int64_t> &sizes, torch::Dtype dtype) {
  torch::Tensor tensor = torch::empty({0}, torch::TensorOptions().dtype(dtype));
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return tensor;
}

}  // namespace zf
