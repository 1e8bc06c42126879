// The weights of a Hugging Face checkpoint directory as a ParameterSource: everything is checked
// (shape, names, dtypes) when it opens, from the headers alone; a fill reads only the bytes of the
// part it is asked for, straight from the memory-mapped file. gpt-oss's MXFP4 experts (NAME_blocks
// and NAME_scales in place of NAME) are dequantised, the experts a part covers at a time (mxfp4.hpp).
#include "model/hf_checkpoint.hpp"
#include "model/mxfp4.hpp"

#include "checkpoint/checksum.hpp"
#include "checkpoint/safetensors.hpp"
#include "model/family.hpp"
#include "model/transformer.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "runtime/log.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

namespace zf {
namespace {

// Buffers and copies transformers keeps in some checkpoints that are not parameters.
bool is_known_buffer(const std::string &name) {
  auto ends_with = [&](const std::string &suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || ends_with("rotary_emb.inv_freq");
}

class HfWeights final : public ParameterSource {
 public:
  HfWeights(const TransformerModel &model, const std::string &directory);
  void fill(size_t index, const StoredRegion &region, torch::Tensor destination) const override;
  uint64_t bytes_read() const override { return bytes_read_; }

 private:
  struct Stored {
    std::string name;   // in the checkpoint
    const SafetensorsFile *file;
    torch::Dtype dtype;
    std::vector<int64_t> shape;  // as stored ([in, out] for GPT-2's Conv1D weights)
    uint64_t numel;
    bool transposed;
    const SafetensorsFile *scales = nullptr;  // MXFP4: `name` + "_blocks" in `file`, + "_scales" here
    int64_t index = -1, row0 = 0, rows = 0;  // a slice of a fused tensor (fused_experts.hpp), or index -1
  };
  // The MXFP4 tensor `name` (NAME_blocks, NAME_scales) as parameter `p`, or false where there is none.
  bool add_mxfp4(const HfTensor &p, const std::string &name, std::set<std::string> &used);
  void fill_mxfp4(const Stored &s, const StoredRegion &region, torch::Tensor destination) const;
  // A tensor whose writer recorded its checksum (zfcore export, checkpoint.export_hf) is checked
  // whole before its first fill: a flipped bit on disk is a located error, not a silently other model.
  void check_once(const Stored &s) const;

  SafetensorsSet weights_;
  std::vector<Stored> stored_;  // per parameter
  mutable std::atomic<uint64_t> bytes_read_{0};
  mutable std::mutex checked_mutex_;
  mutable std::set<std::string> checked_;  // tensors checked against their checksums (a fused one serves many)
};

bool HfWeights::add_mxfp4(const HfTensor &p, const std::string &name, std::set<std::string> &used) {
  const std::string blocks = name + "_blocks", scales = name + "_scales";
  if (p.tensor.dim() != 3 || !weights_.has(blocks) || !weights_.has(scales)) return false;
  const TensorInfo &b = weights_.info(blocks), &sc = weights_.info(scales);
  const std::vector<int64_t> expected = p.tensor.sizes().vec();
  const bool fits = b.dtype_name == "U8" && sc.dtype_name == "U8" && b.shape.size() == 4 && sc.shape.size() == 3 &&
                    b.shape[3] == 16 && std::vector<int64_t>(b.shape.begin(), b.shape.end() - 1) == sc.shape &&
                    std::vector<int64_t>{b.shape[0], b.shape[2] * 32, b.shape[1]} == expected;
  ZF_REQUIRE(fits, "%s: the MXFP4 tensors '%s' (%s %s) and '%s' (%s %s) do not dequantise to the shape %s the model "
             "expects for '%s' (uint8 blocks [E, out, in / 32, 16] and scales [E, out, in / 32])",
             weights_.file_of(blocks).path().c_str(), blocks.c_str(), b.dtype_name.c_str(),
             c10::str(c10::IntArrayRef(b.shape)).c_str(), scales.c_str(), sc.dtype_name.c_str(),
             c10::str(c10::IntArrayRef(sc.shape)).c_str(), c10::str(c10::IntArrayRef(expected)).c_str(), name.c_str());
  stored_.push_back(Stored{blocks, &weights_.file_of(blocks), torch::kUInt8, b.shape, uint64_t(p.tensor.numel()),
                           false, &weights_.file_of(scales)});
  used.insert(blocks);
  used.insert(scales);
  return true;
}

// The experts that elements [x0, x0 + nx) of the flat [E, in, out] tensor fall in, dequantised.
void HfWeights::fill_mxfp4(const Stored &s, const StoredRegion &region, torch::Tensor destination) const {
  const std::string base = s.name.substr(0, s.name.size() - std::string("_blocks").size());
  const auto [block_bytes, block_size] = s.file->bytes(s.name);
  const auto [scale_bytes, scale_size] = s.scales->bytes(base + "_scales");
  const std::vector<int64_t> scale_shape(s.shape.begin(), s.shape.end() - 1);
  auto bytes = torch::TensorOptions().dtype(torch::kUInt8);
  torch::Tensor blocks = torch::from_blob(const_cast<unsigned char *>(block_bytes), s.shape, bytes);
  torch::Tensor scales = torch::from_blob(const_cast<unsigned char *>(scale_bytes), scale_shape, bytes);
  const int64_t begin = region.x0, count = region.numel();  // a run of the flat tensor (stack_run)
  if (count == 0) return;
  const int64_t per_expert = int64_t(s.numel) / s.shape[0];
  const int64_t first = begin / per_expert, last = (begin + count - 1) / per_expert;
  torch::NoGradGuard no_grad;
  torch::Tensor out = destination.view({-1});
  for (int64_t e = first; e <= last; ++e) {  // one expert at a time: its fp32 values, not all of them, in memory
    const int64_t from = std::max(begin, e * per_expert), to = std::min(begin + count, (e + 1) * per_expert);
    torch::Tensor values = dequantize_mxfp4(blocks.narrow(0, e, 1), scales.narrow(0, e, 1)).view({-1});
    out.narrow(0, from - begin, to - from).copy_(values.narrow(0, from - e * per_expert, to - from));
  }
  bytes_read_ += uint64_t((block_size + scale_size) / uint64_t(s.shape[0]) * uint64_t(last - first + 1));
}

void HfWeights::check_once(const Stored &s) const {
  {
    std::lock_guard<std::mutex> lock(checked_mutex_);
    if (checked_.count(s.name)) return;
  }
  const std::string recorded = s.file->checksum(s.name);
  if (!recorded.empty()) {
    const auto [data, size] = s.file->bytes(s.name);
    const std::string actual = checksum_hex(data, size);
    ZF_REQUIRE(actual == recorded,
               "%s: tensor '%s' does not match the checksum written with it (written %s, read %s): the file changed "
               "after it was written (a flipped bit, a bad copy); export it again from its checkpoint (zfcore export "
               "CHECKPOINT OUT_DIR) or restore the file", s.file->path().c_str(), s.name.c_str(),
               excerpt(recorded).c_str(), actual.c_str());
  }
  std::lock_guard<std::mutex> lock(checked_mutex_);
  checked_.insert(s.name);
}

HfWeights::HfWeights(const TransformerModel &t, const std::string &directory)
    : weights_(SafetensorsSet::open_directory(directory)) {
  // Checkpoints saved from the base model (GPT2Model, LlamaModel) lack the "transformer." or
  // "model." prefix of the LM-head model.
  const std::string prefix = t.shape().is_gpt2() ? "transformer." : "model.";
  std::set<std::string> used;
  auto stored_name = [&](const std::vector<std::string> &names) {
    for (const std::string &candidate : names) {
      if (weights_.has(candidate)) return candidate;
      if (candidate.rfind(prefix, 0) == 0 && weights_.has(candidate.substr(prefix.size())))
        return candidate.substr(prefix.size());
    }
    return std::string();
  };
  size_t quantized = 0;
  for (const HfTensor &p : t.hf_tensors()) {
    const std::vector<std::string> names = hf_tensor_names(t.shape().type, p.name);
    std::string name = stored_name(names);
    // Qwen3.5-MoE's experts: one tensor each, as transformers saves them, or a layer's experts fused.
    const bool fused = name.empty() && p.fused.defined();
    const std::vector<std::string> fused_names =
        p.fused.defined() ? hf_tensor_names(t.shape().type, p.fused.name) : std::vector<std::string>{};
    if (fused) name = stored_name(fused_names);
    if (name.empty() && add_mxfp4(p, names.front(), used)) {
      ++quantized;
      continue;
    }
    ZF_REQUIRE(!name.empty(), "%s: the checkpoint has no tensor '%s'%s, which a %s model with this shape needs",
               directory.c_str(), names.front().c_str(),
               p.fused.defined() ? (" (nor '" + fused_names.front() + "', the layer's experts fused)").c_str() : "",
               t.name().c_str());
    const SafetensorsFile &file = weights_.file_of(name);
    const TensorInfo &info = file.info(name);
    ZF_REQUIRE(at::isFloatingType(safetensors_dtype(info.dtype_name)),
               "%s: tensor '%s' holds %s values; weights must be floating point (F32, BF16, F16 or F64): is this a "
               "quantized or damaged checkpoint?", file.path().c_str(), name.c_str(), info.dtype_name.c_str());
    std::vector<int64_t> expected = fused ? p.fused.shape : p.tensor.sizes().vec();
    if (p.transposed) std::swap(expected[0], expected[1]);
    ZF_REQUIRE(info.shape == expected, "%s: tensor '%s' has shape %s but the model expects %s", file.path().c_str(),
               name.c_str(), c10::str(c10::IntArrayRef(info.shape)).c_str(),
               c10::str(c10::IntArrayRef(expected)).c_str());
    stored_.push_back(Stored{name, &file, safetensors_dtype(info.dtype_name), info.shape, uint64_t(p.tensor.numel()),
                             p.transposed});
    if (fused) {
      Stored &s = stored_.back();
      s.index = p.fused.index, s.row0 = p.fused.row0, s.rows = p.tensor.size(0);
      s.numel = uint64_t(c10::multiply_integers(info.shape));
    }
    used.insert(name);
  }
  if (quantized)
    log_info(format("%s: %zu expert tensors stored in MXFP4 (NAME_blocks, NAME_scales) are dequantised to %s at load; "
                    "an export writes them unquantised", directory.c_str(), quantized,
                    t.options().dtype.c_str()));
  std::vector<std::string> unused;
  const std::vector<std::string> heads = hf_tensor_names(t.shape().type, "lm_head.weight");
  for (const std::string &name : weights_.names()) {
    bool tied_copy = t.shape().tie_embeddings && std::find(heads.begin(), heads.end(), name) != heads.end();
    if (!used.count(name) && !tied_copy && !is_known_buffer(name)) unused.push_back(name);
  }
  const Family *family = find_family(t.shape().type);
  if (!unused.empty() && family && family->image_text())
    log_info(format("%s: the %s model trains its language model only: %zu tensors outside it (the vision tower, "
                    "first '%s') stay frozen and an export copies them unchanged from here", directory.c_str(),
                    t.name().c_str(), unused.size(), unused.front().c_str()));
  else if (!unused.empty())
    log_warn(format("%s: %zu tensors of the checkpoint are not used by the %s model (first: '%s')", directory.c_str(),
                    unused.size(), t.name().c_str(), unused.front().c_str()));
}

void HfWeights::fill(size_t index, const StoredRegion &asked, torch::Tensor destination) const {
  const Stored &s = stored_.at(index);
  check_once(s);
  // A stack of matrices (3-D) is filled as a run of its flat [numel, 1], whatever the buffers' layout;
  // a slice of a fused tensor (index >= 0) is a matrix.
  const StoredRegion region =
      s.shape.size() >= 3 && s.index < 0 ? stack_run(asked, s.scales ? s.shape[1] : s.shape.back()) : asked;
  if (s.scales) return fill_mxfp4(s, region, destination);
  const int64_t element = int64_t(c10::elementSize(s.dtype));
  // The tensor's bytes inside the file's mapping: read_pieces hands them over in one piece, and
  // only the part copied below is read (paged in from disk).
  const unsigned char *bytes = nullptr;
  TensorPieces whole{s.name, s.dtype, s.numel, std::max<uint64_t>(s.numel, 1), {},
                     [&](uint64_t, uint64_t, const void *in) { bytes = static_cast<const unsigned char *>(in); }};
  s.file->read_pieces(whole);
  if (!bytes) return;  // an empty tensor
  torch::Tensor file;
  if (reinterpret_cast<uintptr_t>(bytes) % uint64_t(element) == 0) {  // the usual case: a view of the mapping
    file = torch::from_blob(const_cast<unsigned char *>(bytes), s.shape, torch::TensorOptions().dtype(s.dtype));
    bytes_read_ += uint64_t(region.numel() * element);
  } else {  // a file whose writer did not align its tensors: the whole tensor is read
    file = s.file->load(s.name);
    bytes_read_ += uint64_t(file.numel() * element);
  }
  if (s.index >= 0) file = file[s.index].narrow(0, s.row0, s.rows);  // the parameter's slice of a fused tensor
  // W [rows, cols] as the model holds it (GPT-2's Conv1D weights are stored W^T; a 1-D tensor is [numel, 1]).
  torch::Tensor matrix = file.dim() == 2 ? (s.transposed ? file.t() : file) : file.reshape({-1, 1});
  const int64_t rows = matrix.size(0), cols = matrix.size(1);
  torch::NoGradGuard no_grad;
  torch::Tensor target = destination.view({region.nx, region.ny});
  target.copy_(stored_part(matrix, region));
  // A NaN or infinite weight would only show as a NaN loss at step 1: name it here.
  if (!target.isfinite().all().item<bool>()) {
    const int64_t at = target.reshape({-1}).isfinite().logical_not().nonzero()[0][0].item<int64_t>();
    const int64_t x = region.x0 + at / region.ny, y = region.y0 + at % region.ny;
    const int64_t row = region.column_major ? y : x, col = region.column_major ? x : y;  // of W
    const int64_t slice = s.index >= 0 ? s.index * s.shape[1] * s.shape[2] + s.row0 * s.shape[2] : 0;
    const int64_t element_index = slice + (s.transposed ? col * rows + row : row * cols + col);  // as stored
    throw Error(format("%s: tensor '%s' holds a value that is not finite (%g at element %lld): the checkpoint is "
                       "damaged or its training diverged", s.file->path().c_str(), s.name.c_str(),
                       target.reshape({-1})[at].item<double>(), (long long)element_index));
  }
}

}  // namespace

std::unique_ptr<ParameterSource> hf_parameter_source(Model &model, const std::string &directory) {
  auto *t = dynamic_cast<TransformerModel *>(&model);
  ZF_REQUIRE(t, "model.type = \"%s\" has no Hugging Face format (only the transformers do: %s)", model.name().c_str(),
             family_names().c_str());
  TransformerShape stored = read_hf_config(directory);
  ZF_REQUIRE(stored == t->shape(), "%s/config.json does not describe this model (%s)", directory.c_str(),
             shape_difference(t->shape(), stored, "here", "in the checkpoint").c_str());
  return std::make_unique<HfWeights>(*t, directory);
}

void load_hf_checkpoint(Model &model, const std::string &directory) {
  allocate_parameters(model.parameters(), *hf_parameter_source(model, directory));
}

}  // namespace zf
