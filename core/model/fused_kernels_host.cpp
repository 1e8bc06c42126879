// The decoder layer's fused kernels on the host (fused_kernels.hpp): fused_kernels.cu's arithmetic
// as loops over rows, spread over libtorch's intra-op threads, and each launch sent to the GPU's
// kernel or to these by its Place. Values are rounded to the dtype where the CUDA kernels round
// them; a row's sums are taken in double (the GPU sums float32 in a tree; both are within float32's
// rounding of the exact sum).
#include "model/fused_kernels.hpp"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace zf::kernels {

int64_t weight_gradient_parts(int64_t rows) { return rows < 128 ? (rows > 0 ? rows : 1) : 128; }

namespace host {
namespace {

using bf16 = c10::BFloat16;

inline float load(const float *p, int64_t i) { return p[i]; }
inline float load(const bf16 *p, int64_t i) { return float(p[i]); }
inline void store(float *p, int64_t i, float v) { p[i] = v; }
inline void store(bf16 *p, int64_t i, float v) { p[i] = bf16(v); }  // round to nearest even, as the GPU's
// v stored in a tensor of T and read again.
template <class T> inline float round_to(float v) { return float(T(v)); }

// fn(row) for every row of [0, rows), rows of `cols` elements, the rows split over the threads.
template <class Fn> void each_row(int64_t rows, int64_t cols, const Fn &fn) {
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(cols, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) fn(row);
  });
}

// The sum of term(c) over [0, n), in double, four running sums (no chain of dependent additions).
template <class Term> double sum_over(int64_t n, const Term &term) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) s0 += term(c), s1 += term(c + 1), s2 += term(c + 2), s3 += term(c + 3);
  for (; c < n; ++c) s0 += term(c);
  return (s0 + s1) + (s2 + s3);
}

template <class T> void norm_forward(const NormLaunch &a) {
  const T *x = static_cast<const T *>(a.x), *branch = static_cast<const T *>(a.branch);
  const T *w = static_cast<const T *>(a.weight);
  T *sum = static_cast<T *>(a.sum), *y = static_cast<T *>(a.y);
  each_row(a.rows, a.cols, [&](int64_t row) {
    const int64_t base = row * a.cols;
    if (branch)
      for (int64_t c = 0; c < a.cols; ++c) store(sum, base + c, load(x, base + c) + load(branch, base + c));
    const T *h = (branch ? sum : x) + base;
    const double squares = sum_over(a.cols, [&](int64_t c) { return double(load(h, c)) * load(h, c); });
    const float rstd = 1.f / std::sqrt(float(squares / double(a.cols)) + a.eps);
    a.rstd[row] = rstd;
    for (int64_t c = 0; c < a.cols; ++c) {
      const float n = load(h, c) * rstd, wc = load(w, c);
      float out;
      switch (a.mode) {
        case NormMode::cast_then_scale: out = wc * round_to<T>(n); break;
        case NormMode::scale_then_cast: out = wc * n; break;
        default: out = n * (1.f + wc); break;
      }
      store(y, base + c, out);
    }
  });
}

template <class T> void norm_backward(const NormBackwardLaunch &a) {
  const T *dy = static_cast<const T *>(a.dy), *dsum = static_cast<const T *>(a.dsum);
  const T *h = static_cast<const T *>(a.h), *w = static_cast<const T *>(a.weight);
  T *dx = static_cast<T *>(a.dx);
  const bool one_plus = a.mode == NormMode::one_plus;
  auto scale = [&](int64_t c) { return one_plus ? 1.f + load(w, c) : load(w, c); };
  each_row(a.rows, a.cols, [&](int64_t row) {
    const int64_t base = row * a.cols;
    const float rstd = a.rstd[row];
    const double dot = sum_over(a.cols, [&](int64_t c) {
      return double(load(dy, base + c) * scale(c) * load(h, base + c) * rstd);
    });
    const float mean = float(dot / double(a.cols));
    for (int64_t c = 0; c < a.cols; ++c) {
      const float hat = load(h, base + c) * rstd;
      float g = rstd * (load(dy, base + c) * scale(c) - hat * mean);
      if (dsum) g += load(dsum, base + c);
      store(dx, base + c, g);
    }
  });
  if (!a.dweight_parts) return;
  // Part p sums rows p, p + parts, ... of every column, as the GPU's blocks do.
  at::parallel_for(0, a.parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part) {
      float *acc = a.dweight_parts + part * a.cols;
      std::fill(acc, acc + a.cols, 0.f);
      for (int64_t row = part; row < a.rows; row += a.parts) {
        const int64_t base = row * a.cols;
        const float rstd = a.rstd[row];
        for (int64_t c = 0; c < a.cols; ++c) {
          const float n = load(h, base + c) * rstd;
          acc[c] += load(dy, base + c) * (a.mode == NormMode::cast_then_scale ? round_to<T>(n) : n);
        }
      }
    }
  });
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

inline float activation(float g, bool gelu) {
  if (gelu) return 0.5f * g * (1.f + std::tanh(kGeluScale * (g + 0.044715f * g * g * g)));
  return g / (1.f + std::exp(-g));
}

inline float activation_grad(float g, bool gelu) {
  if (gelu) {
    const float t = std::tanh(kGeluScale * (g + 0.044715f * g * g * g));
    return 0.5f * (1.f + t) + 0.5f * g * (1.f - t * t) * kGeluScale * (1.f + 3.f * 0.044715f * g * g);
  }
  const float s = 1.f / (1.f + std::exp(-g));
  return s * (1.f + g * (1.f - s));
}

// act(gate) * up (forward), or the gradients of gate and up (backward), row by row.
template <class T> void glu(const GluLaunch &a, bool backward) {
  const T *gate = static_cast<const T *>(a.gate), *up = static_cast<const T *>(a.up);
  const T *dout = static_cast<const T *>(a.dout);
  T *out = static_cast<T *>(a.out), *dgate = static_cast<T *>(a.dgate), *dup = static_cast<T *>(a.dup);
  each_row(a.rows, a.cols, [&](int64_t row) {
    const T *g = gate + row * a.gate_row_stride, *u = up + row * a.up_row_stride;
    const int64_t base = row * a.cols;
    for (int64_t c = 0; c < a.cols; ++c) {
      const float act = round_to<T>(activation(load(g, c), a.gelu));
      if (!backward) {
        store(out, base + c, act * load(u, c));
        continue;
      }
      const float d = load(dout, base + c);
      store(dup, base + c, d * act);
      store(dgate, base + c, d * load(u, c) * activation_grad(load(g, c), a.gelu));
    }
  });
}

template <class T> void rotate(const RopeLaunch &a) {
  const T *x = static_cast<const T *>(a.x), *cos = static_cast<const T *>(a.cos);
  const T *sin = static_cast<const T *>(a.signed_sin);
  T *out = static_cast<T *>(a.out);
  const int64_t half = a.rotated / 2;
  each_row(a.batch * a.heads * a.length, a.head_dim, [&](int64_t row) {
    const int64_t t = row % a.length, head = row / a.length % a.heads, b = row / a.length / a.heads;
    const T *in = x + b * a.x_strides[0] + head * a.x_strides[1] + t * a.x_strides[2];
    T *to = out + b * a.out_strides[0] + head * a.out_strides[1] + t * a.out_strides[2];
    const T *row_cos = cos + t * a.rotated, *row_sin = sin + t * a.rotated;
    for (int64_t c = 0; c < a.head_dim; ++c) {
      float v = load(in, c);
      if (c < a.rotated) {
        const int64_t partner = c < half ? c + half : c - half;
        v = v * load(row_cos, c) + a.sign * load(in, partner) * load(row_sin, c);
      }
      store(to, c, v);
    }
  });
}

// A logit as the composed ops give it: raw / divisor, softcap * tanh(. / softcap), in the dtype.
template <class T> inline float transformed(float raw, float divisor, float softcap) {
  float z = divisor != 1.f ? raw / divisor : raw;
  if (softcap > 0.f) z = softcap * std::tanh(z / softcap);
  return round_to<T>(z);
}

template <class T> void loss_rows_forward(const LossLaunch &a) {
  const T *logits = static_cast<const T *>(a.logits);
  each_row(a.rows, a.cols, [&](int64_t row) {
    thread_local std::vector<float> z;
    z.resize(size_t(a.cols));
    float top = -INFINITY;
    for (int64_t c = 0; c < a.cols; ++c) {
      z[c] = transformed<T>(load(logits, row * a.cols + c), a.divisor, a.softcap);
      top = std::max(top, z[c]);
    }
    const double total = sum_over(a.cols, [&](int64_t c) { return double(std::exp(z[c] - top)); });
    const float lse = top == -INFINITY ? top : top + float(std::log(total));
    a.lse[row] = lse;
    const int64_t target = a.targets[row] - a.first;
    a.loss[row] = target >= 0 && target < a.cols && a.targets[row] != -100 ? lse - z[target] : 0.f;
  });
}

template <class T> void loss_rows_backward(const LossLaunch &a) {
  T *logits = static_cast<T *>(a.logits);
  each_row(a.rows, a.cols, [&](int64_t row) {
    T *raw = logits + row * a.cols;
    const float scale = a.row_scale[row], lse = a.lse[row];
    const int64_t target = a.targets[row] - a.first;
    for (int64_t c = 0; c < a.cols; ++c) {
      const float r = load(raw, c);
      float g = std::exp(transformed<T>(r, a.divisor, a.softcap) - lse);
      if (c == target) g -= 1.f;
      g *= scale;
      if (a.softcap > 0.f) {
        const float t = std::tanh(r / a.divisor / a.softcap);
        g *= 1.f - t * t;
      }
      store(raw, c, g / a.divisor);
    }
  });
}

}  // namespace

const char *rms_norm_forward(const NormLaunch &a) {
  a.bf16 ? norm_forward<bf16>(a) : norm_forward<float>(a);
  return nullptr;
}
const char *rms_norm_backward(const NormBackwardLaunch &a) {
  a.bf16 ? norm_backward<bf16>(a) : norm_backward<float>(a);
  return nullptr;
}
const char *glu_forward(const GluLaunch &a) {
  a.bf16 ? glu<bf16>(a, false) : glu<float>(a, false);
  return nullptr;
}
const char *glu_backward(const GluLaunch &a) {
  a.bf16 ? glu<bf16>(a, true) : glu<float>(a, true);
  return nullptr;
}
const char *rope(const RopeLaunch &a) {
  a.bf16 ? rotate<bf16>(a) : rotate<float>(a);
  return nullptr;
}
const char *loss_forward(const LossLaunch &a) {
  a.bf16 ? loss_rows_forward<bf16>(a) : loss_rows_forward<float>(a);
  return nullptr;
}
const char *loss_backward(const LossLaunch &a) {
  a.bf16 ? loss_rows_backward<bf16>(a) : loss_rows_backward<float>(a);
  return nullptr;
}

}  // namespace host

// Each launch where its Place says: the GPU's kernel (a CUDA build's), else the host's loops.
#if ZF_WITH_CUDA
#define ZF_PLACED(kernel, a) ((a).gpu ? cuda::kernel(a) : host::kernel(a))
#else
#define ZF_PLACED(kernel, a) ((a).gpu ? "this build has no CUDA kernels (configure it with -DZF_CUDA=ON)" : host::kernel(a))
#endif
const char *rms_norm_forward(const NormLaunch &a) { return ZF_PLACED(rms_norm_forward, a); }
const char *rms_norm_backward(const NormBackwardLaunch &a) { return ZF_PLACED(rms_norm_backward, a); }
const char *glu_forward(const GluLaunch &a) { return ZF_PLACED(glu_forward, a); }
const char *glu_backward(const GluLaunch &a) { return ZF_PLACED(glu_backward, a); }
const char *rope(const RopeLaunch &a) { return ZF_PLACED(rope, a); }
const char *loss_forward(const LossLaunch &a) { return ZF_PLACED(loss_forward, a); }
const char *loss_backward(const LossLaunch &a) { return ZF_PLACED(loss_backward, a); }
#undef ZF_PLACED

}  // namespace zf::kernels
