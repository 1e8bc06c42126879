// kernel_body.hpp: the update math of every algorithm, written once over a vector type `Lanes`
// and instantiated by each ISA translation unit (kernel_scalar.cpp, kernel_avx2.cpp,
// kernel_avx512.cpp).
//
// Include it inside the ISA's own namespace, after defining `struct Lanes`: width, V (a vector of
// floats), H (the same lanes in 16 bits), load/store of f32, load of bf16/f16, pack_bf16/pack_f16
// into H, store_half/stream_half of H (stream: non-temporal, for 2*width-byte aligned targets),
// fence (orders streamed stores), prefetch, add/mul/div/sqrt/fmadd/fnmadd/sign. Everything here
// then lives in that namespace, so the linker can never pick a template instance compiled for
// another ISA (the classic one-definition hazard of per-file -m flags). No includes of its own, on
// purpose; no std:: templates either, for the same reason.
//
// Order of operations follows torch.optim's formulas (see the comments of each algorithm). The
// SIMD paths use fused multiply-adds; the scalar path is compiled with -ffp-contract=off, so it
// may differ from them by rounding, never by formula.

using V = Lanes::V;

template <GradFormat format>
struct grad_storage {
  using type = uint16_t;
};
template <>
struct grad_storage<GradFormat::f32> {
  using type = float;
};
template <MomentFormat format>
struct moment_storage {
  using type = uint16_t;
};
template <>
struct moment_storage<MomentFormat::f32> {
  using type = float;
};
template <GradFormat format>
using grad_t = typename grad_storage<format>::type;
template <MomentFormat format>
using moment_t = typename moment_storage<format>::type;
using out_t = uint16_t;  // params_out is bf16 or f16

// One group's coefficients as vectors, built once per chunk.
struct Broadcast {
  V grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, l2, decay, step_size,
      bias_correction2_sqrt;
  explicit Broadcast(const GroupCoefficients &c)
      : grad_scale(Lanes::set1(c.grad_scale)),
        beta1(Lanes::set1(c.beta1)),
        one_minus_beta1(Lanes::set1(c.one_minus_beta1)),
        beta2(Lanes::set1(c.beta2)),
        one_minus_beta2(Lanes::set1(c.one_minus_beta2)),
        eps(Lanes::set1(c.eps)),
        l2(Lanes::set1(c.l2)),
        decay(Lanes::set1(c.decay)),
        step_size(Lanes::set1(c.step_size)),
        bias_correction2_sqrt(Lanes::set1(c.bias_correction2_sqrt)) {}
};

template <GradFormat format>
inline V load_grad(const grad_t<format> *source) {
  if constexpr (format == GradFormat::f32)
    return Lanes::load(source);
  else if constexpr (format == GradFormat::bf16)
    return Lanes::load_bf16(source);
  else
    return Lanes::load_f16(source);
}

template <MomentFormat format>
inline V load_moment(const moment_t<format> *source) {
  if constexpr (format == MomentFormat::f32)
    return Lanes::load(source);
  else
    return Lanes::load_bf16(source);
}

template <MomentFormat format>
inline void store_moment(moment_t<format> *target, V value) {
  if constexpr (format == MomentFormat::f32)
    Lanes::store(target, value);
  else
    Lanes::store_half(target, Lanes::pack_bf16(value));
}

// params_out is written once and read by DMA, never by this core: streaming it (when aligned)
// saves the read-for-ownership, 2 of ~30 bytes per element.
template <OutFormat format, bool stream>
inline void store_out(out_t *target, V value) {
  if constexpr (format == OutFormat::none)
    return;
  else {
    const auto half = format == OutFormat::bf16 ? Lanes::pack_bf16(value) : Lanes::pack_f16(value);
    if constexpr (stream)
      Lanes::stream_half(target, half);
    else
      Lanes::store_half(target, half);
  }
}

// torch.optim.AdamW (decoupled) / Adam (L2): p *= 1 - lr wd | g += wd p; m = b1 m + (1-b1) g;
// v = b2 v + (1-b2) g g; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
template <MomentFormat format, bool decoupled>
inline void adam_lanes(V &p, V g, moment_t<format> *m_at, moment_t<format> *v_at,
                       const Broadcast &k) {
  V m = load_moment<format>(m_at);
  V v = load_moment<format>(v_at);
  if constexpr (decoupled)
    p = Lanes::mul(p, k.decay);
  else
    g = Lanes::fmadd(k.l2, p, g);
  m = Lanes::fmadd(k.beta1, m, Lanes::mul(k.one_minus_beta1, g));
  v = Lanes::fmadd(k.beta2, v, Lanes::mul(Lanes::mul(k.one_minus_beta2, g), g));
  V denom = Lanes::add(Lanes::div(Lanes::sqrt(v), k.bias_correction2_sqrt), k.eps);
  p = Lanes::fnmadd(k.step_size, Lanes::div(m, denom), p);
  store_moment<format>(m_at, m);
  store_moment<format>(v_at, v);
}

// Lion (Chen et al. 2023): c = b1 m + (1-b1) g; p *= 1 - lr wd; p -= lr sign(c);
// m = b2 m + (1-b2) g.
template <MomentFormat format>
inline void lion_lanes(V &p, V g, moment_t<format> *m_at, const Broadcast &k) {
  V m = load_moment<format>(m_at);
  V c = Lanes::fmadd(k.beta1, m, Lanes::mul(k.one_minus_beta1, g));
  p = Lanes::mul(p, k.decay);
  p = Lanes::fnmadd(k.step_size, Lanes::sign(c), p);
  m = Lanes::fmadd(k.beta2, m, Lanes::mul(k.one_minus_beta2, g));
  store_moment<format>(m_at, m);
}

// torch.optim.Adagrad: g += wd p; sum += g g; p -= clr * g / (sqrt(sum) + eps).
template <MomentFormat format>
inline void adagrad_lanes(V &p, V g, moment_t<format> *sum_at, const Broadcast &k) {
  V sum = load_moment<format>(sum_at);
  g = Lanes::fmadd(k.l2, p, g);
  sum = Lanes::fmadd(g, g, sum);
  p = Lanes::fnmadd(k.step_size, Lanes::div(g, Lanes::add(Lanes::sqrt(sum), k.eps)), p);
  store_moment<format>(sum_at, sum);
}

// The address kPrefetchElements (2 KiB of fp32) past element_address, computed as an integer:
// it may lie beyond the buffer.
constexpr uint64_t kPrefetchElements = 512;
template <class T>
inline const void *ahead_of(const T *element_address) {
  return reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(element_address) +
                                        kPrefetchElements * sizeof(T));
}

template <Algorithm algorithm>
constexpr bool uses_m = algorithm != Algorithm::adagrad;
template <Algorithm algorithm>
constexpr bool uses_v = algorithm != Algorithm::lion;

// One full vector of elements at the given pointers (state pointers the algorithm does not use
// are never touched).
template <Algorithm algorithm, GradFormat grads, MomentFormat moments, OutFormat out,
          bool stream_out = false>
inline void update_lanes(float *p_at, const grad_t<grads> *g_at, moment_t<moments> *m_at,
                         moment_t<moments> *v_at, out_t *out_at, const Broadcast &k) {
  V g = Lanes::mul(load_grad<grads>(g_at), k.grad_scale);
  V p = Lanes::load(p_at);
  if constexpr (algorithm == Algorithm::adamw) adam_lanes<moments, true>(p, g, m_at, v_at, k);
  if constexpr (algorithm == Algorithm::adam) adam_lanes<moments, false>(p, g, m_at, v_at, k);
  if constexpr (algorithm == Algorithm::lion) lion_lanes<moments>(p, g, m_at, k);
  if constexpr (algorithm == Algorithm::adagrad) adagrad_lanes<moments>(p, g, v_at, k);
  Lanes::store(p_at, p);
  store_out<out, stream_out>(out_at, p);
}

// Elements [begin, end) through one full-width staging vector: the head before the first
// aligned vector and the tail after the last whole one see exactly the body's instructions.
template <Algorithm algorithm, GradFormat grads, MomentFormat moments, OutFormat out>
void update_staged(const UpdateOperands &operands, const Broadcast &k, uint64_t begin,
                   uint64_t end) {
  constexpr uint64_t width = Lanes::width;
  constexpr bool has_m = uses_m<algorithm>, has_v = uses_v<algorithm>;
  constexpr bool has_out = out != OutFormat::none;
  float *p = operands.params;
  auto *g = static_cast<const grad_t<grads> *>(operands.grads);
  auto *m = static_cast<moment_t<moments> *>(operands.m);
  auto *v = static_cast<moment_t<moments> *>(operands.v);
  auto *o = static_cast<out_t *>(operands.params_out);
  const uint64_t n = end - begin;
  float p_tail[width] = {};
  grad_t<grads> g_tail[width] = {};
  moment_t<moments> m_tail[width] = {}, v_tail[width] = {};
  out_t o_tail[width] = {};
  for (uint64_t j = 0; j < n; ++j) {
    p_tail[j] = p[begin + j];
    g_tail[j] = g[begin + j];
    if constexpr (has_m) m_tail[j] = m[begin + j];
    if constexpr (has_v) v_tail[j] = v[begin + j];
  }
  update_lanes<algorithm, grads, moments, out>(p_tail, g_tail, m_tail, v_tail, o_tail, k);
  for (uint64_t j = 0; j < n; ++j) {
    p[begin + j] = p_tail[j];
    if constexpr (has_m) m[begin + j] = m_tail[j];
    if constexpr (has_v) v[begin + j] = v_tail[j];
    if constexpr (has_out) o[begin + j] = o_tail[j];
  }
}

template <Algorithm algorithm, GradFormat grads, MomentFormat moments, OutFormat out,
          bool stream_out, bool prefetch>
void update_body(const UpdateOperands &operands, const Broadcast &k, uint64_t begin, uint64_t end) {
  constexpr bool has_m = uses_m<algorithm>, has_v = uses_v<algorithm>;
  constexpr bool has_out = out != OutFormat::none;
  float *p = operands.params;
  auto *g = static_cast<const grad_t<grads> *>(operands.grads);
  auto *m = static_cast<moment_t<moments> *>(operands.m);
  auto *v = static_cast<moment_t<moments> *>(operands.v);
  auto *o = static_cast<out_t *>(operands.params_out);
  // Software prefetch a fixed distance ahead on every input stream where it pays (see
  // software_prefetch_default). Prefetches past the end are harmless: they never fault.
  for (uint64_t i = begin; i < end; i += Lanes::width) {
    if constexpr (prefetch) {
      Lanes::prefetch(ahead_of(p + i));
      Lanes::prefetch(ahead_of(g + i));
      if constexpr (has_m) Lanes::prefetch(ahead_of(m + i));
      if constexpr (has_v) Lanes::prefetch(ahead_of(v + i));
    }
    update_lanes<algorithm, grads, moments, out, stream_out>(p + i, g + i, has_m ? m + i : nullptr,
                                                             has_v ? v + i : nullptr,
                                                             has_out ? o + i : nullptr, k);
  }
}

// Elements [begin, end): a staged head up to the first index that is a multiple of the width
// (so body vectors are aligned wherever the buffers are), whole vectors in place, a staged tail.
template <Algorithm algorithm, GradFormat grads, MomentFormat moments, OutFormat out>
void update_range(const UpdateOperands &operands, const GroupCoefficients &coefficients,
                  uint64_t begin, uint64_t end) {
  constexpr uint64_t width = Lanes::width;
  const Broadcast k(coefficients);
  uint64_t body_begin = (begin + width - 1) / width * width;
  if (body_begin > end) body_begin = end;
  const uint64_t body_end = body_begin + (end - body_begin) / width * width;
  if (begin < body_begin)
    update_staged<algorithm, grads, moments, out>(operands, k, begin, body_begin);
  const bool stream = out != OutFormat::none && Lanes::width > 1 &&
                      reinterpret_cast<uintptr_t>(operands.params_out) % (2 * width) == 0;
  // Four loops: streamed or stored params_out, with or without software prefetch.
  if (stream) {
    if (operands.prefetch)
      update_body<algorithm, grads, moments, out, true, true>(operands, k, body_begin, body_end);
    else
      update_body<algorithm, grads, moments, out, true, false>(operands, k, body_begin, body_end);
    Lanes::fence();  // streamed stores are weakly ordered: finish them before the step is done
  } else if (operands.prefetch) {
    update_body<algorithm, grads, moments, out, false, true>(operands, k, body_begin, body_end);
  } else {
    update_body<algorithm, grads, moments, out, false, false>(operands, k, body_begin, body_end);
  }
  if (body_end < end) update_staged<algorithm, grads, moments, out>(operands, k, body_end, end);
}

// The table: one instance per combination, chosen at run time.
template <Algorithm algorithm, GradFormat grads, MomentFormat moments>
UpdateFn select_for_out(OutFormat out) {
  switch (out) {
    case OutFormat::none: return &update_range<algorithm, grads, moments, OutFormat::none>;
    case OutFormat::bf16: return &update_range<algorithm, grads, moments, OutFormat::bf16>;
    case OutFormat::f16: return &update_range<algorithm, grads, moments, OutFormat::f16>;
  }
  return nullptr;
}

template <Algorithm algorithm, GradFormat grads>
UpdateFn select_for_moments(MomentFormat moments, OutFormat out) {
  if (moments == MomentFormat::bf16)
    return select_for_out<algorithm, grads, MomentFormat::bf16>(out);
  return select_for_out<algorithm, grads, MomentFormat::f32>(out);
}

template <Algorithm algorithm>
UpdateFn select_for_grads(GradFormat grads, MomentFormat moments, OutFormat out) {
  switch (grads) {
    case GradFormat::f32: return select_for_moments<algorithm, GradFormat::f32>(moments, out);
    case GradFormat::bf16: return select_for_moments<algorithm, GradFormat::bf16>(moments, out);
    case GradFormat::f16: return select_for_moments<algorithm, GradFormat::f16>(moments, out);
  }
  return nullptr;
}

inline UpdateFn select_kernel(Algorithm algorithm, GradFormat grads, MomentFormat moments,
                              OutFormat out) {
  switch (algorithm) {
    case Algorithm::adam: return select_for_grads<Algorithm::adam>(grads, moments, out);
    case Algorithm::adamw: return select_for_grads<Algorithm::adamw>(grads, moments, out);
    case Algorithm::lion: return select_for_grads<Algorithm::lion>(grads, moments, out);
    case Algorithm::adagrad: return select_for_grads<Algorithm::adagrad>(grads, moments, out);
  }
  return nullptr;
}
