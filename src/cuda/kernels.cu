// The kernel-launching members of platipus::cuda, instantiated for the two
// value types the library computes in, and CudaGraph's salt update.
#include "convolution_kernels.hpp"
#include "platipus/backend/cuda/kernels.cuh"

namespace platipus {

#define PLATIPUS_INSTANTIATE(T)                                                                    \
  template void detail::im2col<T>(const ConvLayout&, const T*, T*);                                \
  template void detail::col2im<T>(const ConvLayout&, const T*, T*);                                \
  template void cuda::fill<T>(T*, std::int64_t, T);                                                \
  template void cuda::arange<T>(T*, std::int64_t);                                                 \
  template void cuda::unary<T>(UnaryOp, const T*, T*, std::int64_t, T);                            \
  template void cuda::binary<T>(BinaryOp, const T*, const T*, T*, const BroadcastLayout&);         \
  template void cuda::axpy<T>(const T*, const T*, T*, std::int64_t, T);                            \
  template void cuda::foreach_axpy<T>(const PiecesLayout<T>&, T);                                  \
  template void cuda::foreach_sub_mul<T>(const SubMulLayout<T>&);                                  \
  template void cuda::foreach_mul<T>(const MulLayout<T>&);                                         \
  template void cuda::add_n<T>(const SummandsLayout<T>&);                                          \
  template void cuda::add_n<T>(const SummandsLayout<T>&, const BiasLayout&, T*);                   \
  template void cuda::foreach_add_n<T>(const SumsLayout<T>&);                                      \
  template void cuda::foreach_unary<T>(UnaryOp, const PiecesLayout<T>&, T);                        \
  template void cuda::relu_bias_backward<T>(const BiasLayout&, const T*, const T*, T*, T*);        \
  template void cuda::foreach_expand<T>(const PiecesLayout<T>&, std::int64_t);                     \
  template void cuda::foreach_sum_to<T>(const PiecesLayout<T>&, std::int64_t);                     \
  template void cuda::kl_from_ratios<T>(const KlLayout<T>&, T*);                                   \
  template void cuda::kl_from_ratios_backward<T>(const KlLayout<T>&, const T*, T);                 \
  template void cuda::squared_error<T>(const SquaredErrorLayout<T>&, const T*, const T*, T*, T*);  \
  template void cuda::cross_entropy<T>(const CrossEntropyLayout&, const T*, const T*, T*, T*, T*); \
  template void cuda::cross_entropy_backward<T>(const CrossEntropyGradLayout<T>&, const T*,        \
                                                const T*, const T*, const T*, T*);                 \
  template void cuda::foreach_fill_normal_rows<T>(const NormalRowsLayout<T>&, std::uint64_t,       \
                                                  const TaskStreams&);                             \
  template void cuda::select<T>(const T*, const T*, const T*, T*, std::int64_t);                   \
  template void cuda::adam<T>(const AdamLayout<T>&, const AdamStep<T>&, const T*);                 \
  template void cuda::reduce<T>(ReduceOp, const T*, T*, const ReduceLayout&);                      \
  template void cuda::strided_copy<T>(const T*, T*, const CopyLayout&);                            \
  template void cuda::foreach_strided_copy<T>(const CopiesLayout<T>&);                             \
  template void cuda::gemms<T>(const GemmsLayout<T>&);                                             \
  template void cuda::gather<T>(const T*, const std::int64_t*, T*, const IndexLayout&);            \
  template void cuda::scatter_add<T>(const T*, const std::int64_t*, T*, const IndexLayout&);       \
  template void cuda::max_pool2d<T>(const PoolLayout&, const T*, T*, std::int64_t*);               \
  template void cuda::max_pool2d_backward<T>(const PoolLayout&, const T*, const T*,                \
                                             const std::int64_t*, T*);                             \
  template void cuda::max_pool2d_double_backward<T>(const PoolLayout&, const T*, const T*,         \
                                                    const std::int64_t*, T*);                      \
  template void cuda::batch_norm<T>(const NormLayout&, const T*, T, const T*, const T*, T*, T*,    \
                                    T*);                                                           \
  template void cuda::batch_norm_backward<T>(const NormLayout&, const T*, const T*, const T*,      \
                                             const T*, const T*, const T*, T*, T*, T*);            \
  template void cuda::batch_norm_double_backward<T>(const NormLayout&, const T*, const T*,         \
                                                    const T*, const T*, const T*, const T*,        \
                                                    const T*, const T*, const T*, T*, T*, T*, T*); \
  template void cuda::fill_uniform<T>(T*, std::int64_t, std::uint64_t, std::uint64_t,              \
                                      std::uint64_t);                                              \
  template void cuda::fill_normal<T>(T*, std::int64_t, std::uint64_t, std::uint64_t,               \
                                     std::uint64_t);                                               \
  template void cuda::fill_normal_rows<T>(T*, std::int64_t, std::int64_t, std::uint64_t,           \
                                          const TaskStreams&, std::uint64_t);
PLATIPUS_INSTANTIATE(float)
PLATIPUS_INSTANTIATE(double)
#undef PLATIPUS_INSTANTIATE

void detail::advance_graph_salt(std::uint64_t* salt) {
  cuda_kernels::launch("advance_graph_salt", 1, cuda_kernels::advance_salt_kernel, salt);
}

}  // namespace platipus
