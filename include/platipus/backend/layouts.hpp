// Plain descriptors that the tensor layer computes and every backend
// consumes: how operands are laid out for one broadcast map, reduction,
// strided copy, batched GEMM or index operation. All extents and strides are
// in elements; a stride of 0 repeats (broadcasts) along that axis.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "platipus/backend/op_codes.hpp"
#include "platipus/core/hd.hpp"
#include "platipus/core/max_rank.hpp"

namespace platipus {

using Strides = std::array<std::int64_t, max_rank>;

// out[i] = f(a[i . stride_a], b[i . stride_b]) over the multi-index i < dims.
struct BroadcastLayout {
  int rank = 0;
  Strides dims{}, stride_a{}, stride_b{};
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[static_cast<std::size_t>(i)];
    return n;
  }
};

// out[i . stride_out] op= in[i . stride_in] over the multi-index i < dims;
// reduced axes have stride_out 0. The input is contiguous (stride_in its
// contiguous strides) but where a reduction reads a slice in place.
struct ReduceLayout {
  int rank = 0;
  Strides dims{}, stride_in{}, stride_out{};
  std::int64_t in_numel = 0, out_numel = 0;
  // The inputs combined into each output (a mean's n): the reduced extents.
  std::int64_t reduced_count() const {
    std::int64_t n = 1;
    for (int d = 0; d < rank; ++d)
      if (stride_out[d] == 0) n *= dims[d];
    return n;
  }
};

// dst[i . stride_dst] = src[i . stride_src] over i < dims.
struct CopyLayout {
  int rank = 0;
  Strides dims{}, stride_src{}, stride_dst{};
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[static_cast<std::size_t>(i)];
    return n;
  }
};

// Up to `capacity` strided copies by one call (one kernel on a device): copy
// i writes its block (copy[i], n[i] elements) from src[i] into dst[i], or
// zeros where src[i] is null. A concat's parts, and a pad's block beside its
// zeros, in one call.
template <class T>
struct CopiesLayout {
  static constexpr int capacity = 4;
  int count = 0;
  std::array<const T*, capacity> src{};
  std::array<T*, capacity> dst{};
  std::array<CopyLayout, capacity> copy{};
  std::array<std::int64_t, capacity> n{};
};

// C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b] for b < batch, row-major,
// op(A) is m x k and op(B) is k x n. A batch stride of 0 reuses one matrix.
template <class T>
struct GemmLayout {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  T alpha = T(1), beta = T(0);
  // Elements from C's first to its last.
  std::int64_t c_extent() const { return (batch - 1) * stride_c + m * n; }
};

// A linear layer's bias gradient [batch, n] from the gradient g [batch,
// rows, n] of its output: g's rows summed, each in row order from 0 (the
// bits of reduce's sum_to). relu_bias_backward first routes g by the
// layer's output (relu_backward) and sums the routed rows.
struct BiasLayout {
  std::int64_t batch = 0, rows = 0, n = 0;
};

// Independent products in one call, C_i = op(A_i) op(B_i) (each GemmLayout
// with its own batch, strides, alpha and beta), and where `sums` is set, the
// rows of `rows` summed into it (BiasLayout): a product's two gradients, or
// a linear layer's product and bias gradients, those needed, one kernel on a
// device where two or three were (issue 38).
template <class T>
struct GemmsLayout {
  static constexpr int capacity = 2;
  int count = 0;
  std::array<GemmLayout<T>, capacity> gemm{};
  std::array<const T*, capacity> a{}, b{};
  std::array<T*, capacity> c{};
  BiasLayout bias{};
  const T* rows = nullptr;
  T* sums = nullptr;
};

// A linear layer's forward in one call: C[b] = activation(op(A[b]) op(B[b]) +
// bias[b]), where bias[b] (n elements, at bias + b * stride_bias; a stride of
// 0 shares one) is added to every row of C[b] and `activation` (copy: none)
// applies to each element. `gemm` gives the product (its beta is not read).
// The CPU computes the bits of the parts: bias rows, the product accumulated
// onto them, the activation in place (linear_in_parts.hpp).
template <class T>
struct LinearLayout {
  GemmLayout<T> gemm;
  std::int64_t stride_bias = 0;
  UnaryOp activation = UnaryOp::copy;
};

// One Adam step (Kingma & Ba, 2015), applied in place to a parameter p, its
// moments m and v and its gradient g; every backend runs this formula:
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,
//   p -= rate * m / (sqrt(v / correction2) + eps),
//   rate = lr / (1 - b1^t),  correction2 = 1 - b2^t.
// The step number t is not a field: backends read it from their own memory
// (Backend::adam's `step` argument), so that a recorded meta-step that is
// replayed (a CUDA graph) keeps counting.
template <class T>
struct AdamStep {
  T beta1 = T(0.9), beta2 = T(0.999), epsilon = T(1e-8), learning_rate = T(1e-3);

  struct Correction {
    T rate, correction2;
  };
  PLATIPUS_HD Correction at(T t) const {
    using std::pow;
    return {learning_rate / (T(1) - pow(beta1, t)), T(1) - pow(beta2, t)};
  }
  PLATIPUS_HD void apply(const Correction& c, T& p, T& m, T& v, T g) const {
    using std::sqrt;
    m = beta1 * m + (T(1) - beta1) * g;
    v = beta2 * v + (T(1) - beta2) * g * g;
    p -= c.rate * m / (sqrt(v / c.correction2) + epsilon);
  }
};

// Up to `capacity` contiguous tensors mapped by one call, as one kernel on a
// device (PyTorch's foreach kernels): piece i has n[i] elements at a[i]
// (and b[i]), written to y[i]. The capacity covers conv4's 18 pieces; the
// tensor layer cuts longer lists into several calls.
template <class T>
struct PiecesLayout {
  static constexpr int capacity = 24;
  int count = 0;
  std::array<const T*, capacity> a{}, b{};
  std::array<T*, capacity> y{};
  std::array<std::int64_t, capacity> n{};
};

// Up to `capacity` parameter tensors updated by one Adam call (one kernel on
// a device, as the inner loop's foreach_axpy): piece i's n[i] parameters p[i]
// and moments m[i], v[i], in place, from its gradient g[i].
template <class T>
struct AdamLayout {
  static constexpr int capacity = PiecesLayout<T>::capacity;
  int count = 0;
  std::array<T*, capacity> p{}, m{}, v{};
  std::array<const T*, capacity> g{};
  std::array<std::int64_t, capacity> n{};
};

// Up to `capacity` pieces of y = a - r * g, or a + r * g where `add` (one
// kernel on a device): piece i's n[i] elements a[i], g[i], y[i], and its
// rates r[i], of rn[i] elements repeated along a's leading axes (rn[i]
// divides n[i]): the inner loop's step with learned rates (Meta-SGD's alpha,
// PLATIPUS's gamma, MAML++'s), and PLATIPUS's draws mu + sigma eps.
template <class T>
struct SubMulLayout {
  static constexpr int capacity = PiecesLayout<T>::capacity;
  int count = 0;
  bool add = false;
  std::array<const T*, capacity> a{}, r{}, g{};
  std::array<T*, capacity> y{};
  std::array<std::int64_t, capacity> n{}, rn{};
};

// Up to `capacity` pieces of y = r * g, negated where negate[i] (one kernel
// on a device), r[i]'s rn[i] elements repeated along g's leading axes as in
// SubMulLayout: the products foreach_sub_mul's rule makes for all pieces at
// once (autodiff/ops/foreach.hpp).
template <class T>
struct MulLayout {
  static constexpr int capacity = PiecesLayout<T>::capacity;
  int count = 0;
  std::array<const T*, capacity> r{}, g{};
  std::array<T*, capacity> y{};
  std::array<std::int64_t, capacity> n{}, rn{};
  std::array<bool, capacity> negate{};
};

// PLATIPUS's KL over a model's pieces (Algorithm 1, step 5), from each
// piece's ratios r_i [n_i] (log v_p - log v_q + v_q / v_p), squared mean
// differences s_i [rows, n_i] and inverse variances w_i [n_i] of the prior
// (meta/algorithms/kl_divergence.hpp), by one call (one kernel on a device):
//   y[t] = sum over i, in order, of 1/2 sum_j ((r_i[j] + s_i[t, j] w_i[j]) - 1),
// with the bits of mul, add, shift, reduce over j from 0 (a one-element row
// as it is), scale and add on each piece, y[t] adding to what it holds where
// `accumulate` (a list longer than capacity). The backward call writes, from
// h[t] = g[t] s (s alone where g is null): dr_i[j] = sum_t h[t] and dw_i[j] =
// sum_t h[t] s_i[t, j] in order from 0, and ds_i[t, j] = h[t] w_i[j], each
// where its pointer is not null: the bits of those ops' rules.
template <class T>
struct KlLayout {
  static constexpr int capacity = PiecesLayout<T>::capacity;
  int count = 0;
  std::int64_t rows = 0;
  bool accumulate = false;
  std::array<const T*, capacity> r{}, s{}, w{};
  std::array<T*, capacity> dr{}, ds{}, dw{};
  std::array<std::int64_t, capacity> n{};
};

// A squared-error loss over `rows` rows of `points` consecutive points in
// one call (nn/losses.hpp's mse_loss, and gaussian_nll_loss at a variance
// known on the host): each point's difference d = pred - target (kept, for
// the gradient) and q = d^2, mapped by the Gaussian NLL's ((q / variance +
// log_variance) + log_two_pi) / 2 where `gaussian`; each row's q summed in
// order from 0, times 1 / points where `mean`, into y (a row of one point
// is its q): the bits of sub, square, (div, shift, shift, scale) and reduce.
template <class T>
struct SquaredErrorLayout {
  std::int64_t rows = 0, points = 0;
  bool mean = false, gaussian = false;
  T variance = T(1), log_variance = T(0), log_two_pi = T(0);
};

// Softmax cross-entropy of `rows` rows of `classes` logits z against target
// rows y that sum to one: per row lse(z) - <y, z>, and p = softmax(z). With
// `class_indices` the targets are one class index a row, and y, written out,
// their one-hot rows (1 where the class is the index).
struct CrossEntropyLayout {
  std::int64_t rows = 0, classes = 0;
  bool class_indices = false;
};

// Up to `capacity` normal fills of `rows` rows each by one call (one kernel
// on a device), piece i's rows of n[i] values at y[i], row r from (seed,
// task_stream(streams, r), block[i]): fill_normal_rows on each piece, with
// its bits (TaskNoise's draws for a model's pieces).
template <class T>
struct NormalRowsLayout {
  static constexpr int capacity = PiecesLayout<T>::capacity;
  int count = 0;
  std::int64_t rows = 0;
  std::array<T*, capacity> y{};
  std::array<std::int64_t, capacity> n{};
  std::array<std::uint64_t, capacity> block{};
};

// How a tensor broadcast to a larger shape repeats along at most two runs
// of its axes: the larger viewed as [outer, outer_repeat, middle,
// inner_repeat, inner] and the tensor as [outer, middle, inner]. Both
// repeats 1: the tensor has the larger shape.
struct Repetition {
  std::int64_t outer_repeat = 1, middle = 1, inner_repeat = 1, inner = 1;
  PLATIPUS_HD bool none() const { return outer_repeat == 1 && inner_repeat == 1; }
  // The tensor's element at the larger one's element i.
  PLATIPUS_HD std::int64_t source(std::int64_t i) const {
    if (none()) return i;
    const std::int64_t rest = i / (inner_repeat * inner) * inner + i % inner;  // inner run dropped
    const std::int64_t block = middle * inner;
    return rest / (outer_repeat * block) * block + rest % block;
  }
};

// The gradient in the logits of a softmax cross-entropy's rows
// (CrossEntropyLayout's), from the gradient into their losses, (p - y) times
// it (a value a row, repeated over the rows as `repetition` says where it
// broadcasts to them, or `uniform` for every row where the call is given
// none: a mean's or a sum's, known on the host), and from the gradient q
// into p where one is given, the softmax Jacobian's product p q - p <p, q>;
// their sum where both flow. The bits of the ops it replaced (sub, scale or
// mul; mul, sum, mul, sub; add): products stored before their sums, the
// sums in order from 0.
template <class T>
struct CrossEntropyGradLayout {
  std::int64_t rows = 0, classes = 0;
  bool from_loss = false;  // a gradient flows into the losses
  T uniform = T(0);        // its value in every row, where the call has no row values
  Repetition repetition{};
};

// y = ±x[0] ± x[1] ± ... ± x[count - 1], added in that order, over n
// contiguous elements, x[k] negated where negate[k]: the gradients one value
// receives, summed by one call (autodiff/grad.hpp) with the bits of negating
// and adding them one by one (a - b is a + (-b) to the bit, signed zeros
// included). x[k] may repeat over y (repetition[k]), as a broadcasting add
// would repeat it: a bias's gradient [tasks, 1, n] beside [tasks, points, n]
// ones, a per-channel one [tasks, 1, c, 1, 1] beside [tasks, n, c, h, w].
// Where `route` is set (n elements), y[i] is the sum where route[i] > 0 and
// 0 elsewhere, relu_backward's formula (op_codes.hpp) applied in the same
// call: a ReLU's gradient from its parts (autodiff/grad.hpp). Where `scale`
// is not 1 (and no route is set), y is the sum times scale, UnaryOp::scale's
// formula: scale's gradient from its parts (autodiff/ops/arithmetic.hpp).
// Both are add_n's (route also with BiasLayout's row sums, whose CUDA kernel
// would contract a scale into its column sums); foreach_add_n sets neither.
template <class T>
struct SummandsLayout {
  static constexpr int capacity = 3;
  int count = 0;
  std::array<const T*, capacity> x{};
  std::array<bool, capacity> negate{};
  std::array<Repetition, capacity> repetition{};
  T* y = nullptr;
  std::int64_t n = 0;
  const T* route = nullptr;
  T scale = 1;
};

// Up to `capacity` add_n sums by one call (one kernel on a device), sum i by
// sum[i]'s layout: the gradients of a foreach op's pieces, added up when its
// rule reads them (autodiff/grad.hpp). At 4040 bytes for double it just fits
// a kernel's 4 KiB of parameters (cuda/kernels.cuh asserts it): a field more
// in SummandsLayout needs a smaller capacity.
template <class T>
struct SumsLayout {
  static constexpr int capacity = PiecesLayout<T>::capacity;
  int count = 0;
  std::array<SummandsLayout<T>, capacity> sum{};
};

// The elements of a layout's largest piece (its n[i]; a sum's n).
template <class Layout>
std::int64_t longest_piece(const Layout& l) {
  std::int64_t longest = 0;
  for (int i = 0; i < l.count; ++i) longest = l.n[i] > longest ? l.n[i] : longest;
  return longest;
}
template <class T>
std::int64_t longest_piece(const SumsLayout<T>& l) {
  std::int64_t longest = 0;
  for (int i = 0; i < l.count; ++i) longest = l.sum[i].n > longest ? l.sum[i].n : longest;
  return longest;
}

// A tensor viewed as [outer, axis, inner] for gather / scatter-add along axis.
struct IndexLayout {
  std::int64_t outer = 1, inner = 1;
  std::int64_t source_axis = 0;  // extent of the indexed axis in the larger tensor
  std::int64_t count = 0;        // number of indices
};

// A 2-D convolution (NCHW, cross-correlation as in deep learning) over
// `groups` independent groups laid out one after another: group g's images
// x[g] [n, c, h, w] meet its filters w[g] [c_out, c, kernel, kernel] and
// give y[g] [n, c_out, ho, wo], with zero padding on every side. The groups
// are MAML's tasks once each task has its own weights.
struct ConvLayout {
  std::int64_t groups = 1, n = 1, c = 1, h = 1, w = 1;
  std::int64_t c_out = 1, kernel = 1, stride = 1, padding = 0;
  std::int64_t ho = 1, wo = 1;
  PLATIPUS_HD std::int64_t x_numel() const { return groups * n * c * h * w; }
  PLATIPUS_HD std::int64_t w_numel() const { return groups * c_out * c * kernel * kernel; }
  PLATIPUS_HD std::int64_t y_numel() const { return groups * n * c_out * ho * wo; }
  bool operator==(const ConvLayout&) const = default;
};

// Batch normalisation's groups: x viewed as [outer, n, c, inner] and
// normalised per (outer, c) over its n * inner elements: a task's channel
// over the task's samples and their positions. Per-group statistics are
// [outer, c], one after another.
struct NormLayout {
  std::int64_t outer = 1, n = 1, c = 1, inner = 1;
  PLATIPUS_HD std::int64_t groups() const { return outer * c; }
  PLATIPUS_HD std::int64_t count() const { return n * inner; }
  PLATIPUS_HD std::int64_t numel() const { return outer * n * c * inner; }
};

// Max pooling over `planes` images [h, w] (no padding): y [planes, ho, wo],
// and for each output the position of its maximum in the whole input, an
// index into x as a flat array. With `relu`, y is relu(maximum) (conv4's
// ReLU after its pooling) and the backward masks the gradient by y > 0.
struct PoolLayout {
  std::int64_t planes = 1, h = 1, w = 1, kernel = 2, stride = 2, ho = 1, wo = 1;
  bool relu = false;
};

}  // namespace platipus
