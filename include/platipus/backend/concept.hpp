// The Backend concept: what a device policy type (platipus::cpu,
// platipus::cuda) provides. Differentiable ops never call a device API
// directly; they reach memory and arithmetic only through these static
// functions, so swapping the policy type moves a whole program to another
// device. All pointers are device pointers of the backend unless named host.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "platipus/backend/layouts.hpp"
#include "platipus/backend/op_codes.hpp"
#include "platipus/core/philox.hpp"

namespace platipus {

template <class B>
concept Backend = requires(
    std::size_t bytes, void* p, const void* cp, float* y, const float* x, double* yd,
    const double* xd, std::int64_t n, const std::int64_t* index, const BroadcastLayout& bl,
    const ReduceLayout& rl, const CopyLayout& cl, const GemmLayout<float>& gf,
    const GemmLayout<double>& gd, const GemmsLayout<float>& gsf, const GemmsLayout<double>& gsd,
    const CopiesLayout<float>& cf, const CopiesLayout<double>& cd, const LinearLayout<float>& lf,
    const LinearLayout<double>& ld, const BiasLayout& bias, const PiecesLayout<float>& pf,
    const PiecesLayout<double>& pd, const SubMulLayout<float>& mf, const SubMulLayout<double>& md,
    const MulLayout<float>& uf, const MulLayout<double>& ud, const SummandsLayout<float>& sf,
    const SummandsLayout<double>& sd, const SumsLayout<float>& nf, const SumsLayout<double>& nd,
    const KlLayout<float>& kf, const KlLayout<double>& kd, const SquaredErrorLayout<float>& ef,
    const SquaredErrorLayout<double>& ed, const CrossEntropyLayout& ce,
    const CrossEntropyGradLayout<float>& ceg, const CrossEntropyGradLayout<double>& cegd,
    const NormalRowsLayout<float>& rf, const NormalRowsLayout<double>& rd,
    const AdamLayout<float>& af, const AdamLayout<double>& ad, const IndexLayout& il,
    const ConvLayout& conv, const PoolLayout& pool, const NormLayout& norm, std::int64_t* positions,
    std::uint64_t u, const TaskStreams& ts) {
  // A human-readable device name, for messages.
  { B::name } -> std::convertible_to<const char*>;
  // How many host threads a learner spreads a meta-batch's tasks over when
  // its settings leave it open (threads = 0).
  { B::default_threads() } -> std::same_as<int>;
  // How many chunks (tapes) a meta-batch of `tasks` is cut into when the
  // settings leave it open (task_chunks = 0): a function of the batch alone,
  // never of the thread count, so that a seed gives the same bits anywhere.
  { B::default_task_chunks(n) } -> std::same_as<std::int64_t>;
  // How many gradients of one value a sweep that records nothing holds before
  // adding them with one add_n call (2: each is added as it comes; at most
  // SummandsLayout's capacity): fewer calls, each gradient held a little longer.
  { B::gradients_per_add } -> std::convertible_to<int>;

  // Memory: cached allocation (no device allocation per op in steady state),
  // byte copies within the device and across the host boundary.
  { B::allocate(bytes) } -> std::same_as<void*>;
  {B::deallocate(p, bytes)};
  {B::copy(p, cp, bytes)};
  {B::copy_to_host(p, cp, bytes)};
  {B::copy_from_host(p, cp, bytes)};
  {B::synchronize()};

  // Elementwise: y = f(x, s); y = f(a, b) under a broadcast layout;
  // y = mask ? a : b and y = a + s * b (all contiguous, n elements).
  {B::fill(y, n, 1.0f)};
  {B::axpy(x, x, y, n, 1.0f)};
  {B::axpy(xd, xd, yd, n, 1.0)};
  // One Adam step in place on each piece's (parameter, first moment, second
  // moment), at the step number stored at the last argument.
  {B::adam(af, AdamStep<float>{}, x)};
  {B::adam(ad, AdamStep<double>{}, xd)};
  {B::unary(UnaryOp::exp, x, y, n, 0.0f)};
  {B::binary(BinaryOp::add, x, x, y, bl)};
  {B::select(x, x, x, y, n)};
  {B::fill(yd, n, 1.0)};
  // y[i] = i for i < n: class indices for one-hot targets, made on the device.
  {B::arange(y, n)};
  {B::arange(yd, n)};
  {B::unary(UnaryOp::exp, xd, yd, n, 0.0)};
  {B::binary(BinaryOp::add, xd, xd, yd, bl)};
  {B::select(xd, xd, xd, yd, n)};
  // The same over many tensors in one call (PiecesLayout): y_i = a_i + s b_i
  // and y_i = f(a_i, s), with the formulas of axpy and unary.
  {B::foreach_axpy(pf, 1.0f)};
  {B::foreach_axpy(pd, 1.0)};
  {B::foreach_unary(UnaryOp::scale, pf, 1.0f)};
  {B::foreach_unary(UnaryOp::scale, pd, 1.0)};
  // y_i = a_i - r_i g_i (a_i + r_i g_i where add), r_i repeated along a_i's
  // leading axes, with the bits of binary mul then binary sub (add).
  {B::foreach_sub_mul(mf)};
  {B::foreach_sub_mul(md)};
  // y_i = r_i g_i (negated where negate[i]), r_i repeated as above, with the
  // bits of binary mul (then neg).
  {B::foreach_mul(uf)};
  {B::foreach_mul(ud)};
  // Each a_i (n_i values) written `copies` times one after another into y_i,
  // and back: y_i = the sum of a_i's `copies` blocks of n_i values, added in
  // order from 0 (the bits of reduce over a leading axis).
  {B::foreach_expand(pf, n)};
  {B::foreach_expand(pd, n)};
  {B::foreach_sum_to(pf, n)};
  {B::foreach_sum_to(pd, n)};
  // y = ±x_0 ± x_1 ± ... in that order (SummandsLayout, 2 to its capacity).
  {B::add_n(sf)};
  {B::add_n(sd)};
  // And y's rows summed into a bias's gradient (BiasLayout: each batch
  // entry's rows from +0 in order), in the same call: a linear layer's ReLU
  // and bias gradients from a gradient in parts.
  {B::add_n(sf, bias, y)};
  {B::add_n(sd, bias, yd)};
  // Several such sums in one call (SumsLayout), each with add_n's bits.
  {B::foreach_add_n(nf)};
  {B::foreach_add_n(nd)};

  // PLATIPUS's KL over pieces from its ratios, and its gradients (KlLayout).
  {B::kl_from_ratios(kf, y)};
  {B::kl_from_ratios(kd, yd)};
  {B::kl_from_ratios_backward(kf, x, 1.0f)};
  {B::kl_from_ratios_backward(kd, xd, 1.0)};

  // A squared-error loss's points, differences and row sums or means
  // (SquaredErrorLayout): y from pred and target, the differences kept.
  {B::squared_error(ef, x, x, y, y)};
  {B::squared_error(ed, xd, xd, yd, yd)};

  // A softmax cross-entropy's rows (CrossEntropyLayout): the losses, the
  // softmax and the target rows (written where class indices were given)
  // from logits and targets.
  {B::cross_entropy(ce, x, x, y, y, y)};
  {B::cross_entropy(ce, xd, xd, yd, yd, yd)};
  // Its gradient in the logits (CrossEntropyGradLayout) from p, y, the
  // losses' gradient (null where uniform or none) and p's (null where none).
  {B::cross_entropy_backward(ceg, x, x, x, x, y)};
  {B::cross_entropy_backward(cegd, xd, xd, xd, xd, yd)};

  // Reductions over the axes that a layout maps to one output element.
  {B::reduce(ReduceOp::sum, x, y, rl)};
  {B::reduce(ReduceOp::sum, xd, yd, rl)};

  // Strided copy (transpose, slice, expand), and several in one call, a
  // null source writing zeros (concat, pad).
  {B::strided_copy(x, y, cl)};
  {B::strided_copy(xd, yd, cl)};
  {B::foreach_strided_copy(cf)};
  {B::foreach_strided_copy(cd)};

  // Strided batched GEMM, row-major, with transposes.
  {B::gemm(gf, x, x, y)};
  {B::gemm(gd, xd, xd, yd)};
  // Independent products in one call (GemmsLayout).
  {B::gemms(gsf)};
  {B::gemms(gsd)};
  // A linear layer's forward, activation(x w + bias), in one call
  // (LinearLayout): the bias, product and activation of an MLP layer.
  {B::linear(lf, x, x, x, y)};
  {B::linear(ld, xd, xd, xd, yd)};
  // Its backward before the product when the activation is ReLU (BiasLayout):
  // the routed gradient and the bias's gradient in one call.
  {B::relu_bias_backward(bias, x, x, y, y)};
  {B::relu_bias_backward(bias, xd, xd, yd, yd)};

  // Gather along an axis (dst[o, j, i] = src[o, index[j], i]) and its adjoint
  // (dst = zeros, then dst[o, index[j], i] += src[o, j, i]: dst is written
  // whole, so a backend may zero it as the sums land).
  {B::gather(x, index, y, il)};
  {B::scatter_add(x, index, y, il)};
  {B::gather(xd, index, yd, il)};
  {B::scatter_add(xd, index, yd, il)};

  // Grouped 2-D convolution (ConvLayout) plus a bias [groups, c_out] (or
  // none: a null pointer), and its two adjoints: the input gradient dx =
  // conv2d_input_grad(dy, w) (a transposed convolution) and the filter
  // gradient dw = conv2d_weight_grad(x, dy), all overwritten.
  {B::conv2d(conv, x, x, x, y)};
  {B::conv2d_input_grad(conv, x, x, y)};
  {B::conv2d_weight_grad(conv, x, x, y)};
  {B::conv2d(conv, xd, xd, xd, yd)};
  {B::conv2d_input_grad(conv, xd, xd, yd)};
  {B::conv2d_weight_grad(conv, xd, xd, yd)};
  // Max pooling: values and the flat input position of each maximum (the
  // first in row-major order among equal ones), for gather / scatter_add.
  {B::max_pool2d(pool, x, y, positions)};
  {B::max_pool2d(pool, xd, yd, positions)};
  // Its input gradient dx from g = dL/dy (masked by y > 0 where relu): each
  // output's at its maximum's position, added where windows overlap, zeros
  // elsewhere (relu_backward and scatter_add in one call).
  {B::max_pool2d_backward(pool, x, x, positions, y)};
  {B::max_pool2d_backward(pool, xd, xd, positions, yd)};
  // That backward's own: dg = h at each maximum's position (masked by y > 0
  // where relu): gather and relu_backward in one call.
  {B::max_pool2d_double_backward(pool, x, x, positions, y)};
  {B::max_pool2d_double_backward(pool, xd, xd, positions, yd)};

  // Batch normalisation per group (NormLayout): x_hat = (x - mean) * inv_std
  // with inv_std = 1 / sqrt(biased variance + epsilon) and y = x_hat * scale
  // + shift, one inv_std, scale and shift per group; and its backward from
  // g = dL/dy: d_shift = sum(g), d_scale = sum(x_hat g) per group and
  // dx = inv_std scale (g - mean(g) - x_hat mean(x_hat g)), plus, where the
  // gradients h into x_hat and q into inv_std are given (else null), those
  // results' own terms inv_std (h - mean(h) - x_hat mean(x_hat h)) and
  // -x_hat q inv_std^2 / count.
  {B::batch_norm(norm, x, 1.0f, x, x, y, y, y)};
  {B::batch_norm(norm, xd, 1.0, xd, xd, yd, yd, yd)};
  {B::batch_norm_backward(norm, x, x, x, x, x, x, y, y, y)};
  {B::batch_norm_backward(norm, xd, xd, xd, xd, xd, xd, yd, yd, yd)};
  // That backward's own gradients (raw::batch_norm_double_backward), with
  // the gradients k into d_scale and u into d_shift null where none flows.
  {B::batch_norm_double_backward(norm, x, x, x, x, x, x, x, x, x, y, y, y, y)};
  {B::batch_norm_double_backward(norm, xd, xd, xd, xd, xd, xd, xd, xd, xd, yd, yd, yd, yd)};

  // Philox 4x32-10 fills from (seed, stream, first block); see core/philox.hpp.
  {B::fill_uniform(y, n, u, u, u)};
  {B::fill_normal(y, n, u, u, u)};
  {B::fill_uniform(yd, n, u, u, u)};
  {B::fill_normal(yd, n, u, u, u)};
  // `rows` normal fills of n each in one call, row r from (seed,
  // task_stream(streams, r), first block): the draws of a meta-batch's tasks.
  {B::fill_normal_rows(y, n, n, u, ts, u)};
  {B::fill_normal_rows(yd, n, n, u, ts, u)};
  // Several pieces' such fills in one call (NormalRowsLayout).
  {B::foreach_fill_normal_rows(rf, u, ts)};
  {B::foreach_fill_normal_rows(rd, u, ts)};
};

}  // namespace platipus
