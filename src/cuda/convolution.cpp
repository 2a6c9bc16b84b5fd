// platipus::cuda's convolutions, compiled by the host compiler: through
// cuDNN's convolution API, or as im2col and cuBLAS GEMMs (the GEMM engine).
//
// cuDNN. cuDNN's grouped convolution takes the groups as
// channel blocks of one image ([n, groups c, h, w]), while the library
// keeps each group's images together ([groups, n, c, h, w]: a task's points
// are contiguous), so inputs and outputs are transposed around the call
// when there are several groups of several images. Each thread keeps a
// plan per layout: descriptors and the algorithms chosen once, by cuDNN's
// heuristics, among deterministic ones in full-precision FMA arithmetic (no
// TF32), so a step gives the same numbers on every run and close to the CPU
// backend's. Workspaces come from the thread's device cache.
//
// GEMM. im2col writes x's windows as col [groups, C k k, n, Ho Wo], so that
// one strided batched GEMM per call computes every group's filters times
// its columns, [groups, C_out, n, Ho Wo], transposed to the library's
// [groups, n, C_out, Ho Wo] (no copy for one image per group); the adjoints
// are the transposed GEMMs, and col2im gathers each pixel's column entries.
// cuBLAS's FP32 GEMM (no TF32) and a gather instead of atomics keep it
// deterministic. Column buffers come from the thread's device cache too.
#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <cudnn.h>

#include "convolution_kernels.hpp"
#include "platipus/backend/cuda/cuda.hpp"
#include "platipus/core/error.hpp"

namespace platipus {

namespace {

void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) fail(call, "{}", cudnnGetErrorString(status));
}

// The calling thread's cuDNN handle, bound to its stream.
cudnnHandle_t dnn() {
  struct Handle {
    cudnnHandle_t handle = nullptr;
    Handle() {
      check_cudnn(cudnnCreate(&handle), "cudnnCreate");
      if (const auto status = cudnnSetStream(handle, cudaStreamPerThread);
          status != CUDNN_STATUS_SUCCESS) {
        cudnnDestroy(handle);
        check_cudnn(status, "cudnnSetStream");
      }
    }
    ~Handle() { cudnnDestroy(handle); }  // at thread exit
  };
  thread_local Handle h;
  return h.handle;
}

int dnn_int(std::int64_t value) {
  check(value <= INT_MAX, "cuda::conv2d", "extent {} exceeds cuDNN's int range", value);
  return static_cast<int>(value);
}

// Workspaces above this are not considered (an algorithm that needs more is
// passed over for the next best).
constexpr std::size_t max_workspace = std::size_t{256} << 20;

// Of cuDNN's ranked algorithms that ran their heuristic, use no tensor-core
// (TF32) arithmetic and fit the workspace, the first deterministic one, or
// else the first (cuDNN 9.19 offers no deterministic input gradient for
// three input channels in some layouts).
template <class Perf>
Perf choose(const Perf* ranked, int count, const ConvLayout& l, const char* what) {
  const auto usable = [](const Perf& p) {
    return p.status == CUDNN_STATUS_SUCCESS && p.mathType != CUDNN_TENSOR_OP_MATH &&
           p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && p.memory <= max_workspace;
  };
  for (int i = 0; i < count; ++i)
    if (usable(ranked[i]) && ranked[i].determinism == CUDNN_DETERMINISTIC) return ranked[i];
  for (int i = 0; i < count; ++i)
    if (usable(ranked[i])) return ranked[i];
  fail(what,
       "cuDNN offers no FMA algorithm for {} groups of {} images [{}, {}, {}] and {} filters of "
       "{}x{} (stride {}, padding {})",
       l.groups, l.n, l.c, l.h, l.w, l.c_out, l.kernel, l.kernel, l.stride, l.padding);
}

// One layout's descriptors and algorithms.
struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ConvLayout layout;
  // Each direction's algorithm, chosen on its first use.
  std::optional<cudnnConvolutionFwdAlgoPerf_t> forward_algorithm;
  std::optional<cudnnConvolutionBwdDataAlgoPerf_t> input_grad_algorithm;
  std::optional<cudnnConvolutionBwdFilterAlgoPerf_t> weight_grad_algorithm;

  Plan(const ConvLayout& l, cudnnDataType_t type) : layout(l) {
    check_cudnn(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
    check_cudnn(cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor");
    check_cudnn(cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
    check_cudnn(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
    const int groups = dnn_int(l.groups), n = dnn_int(l.n);
    check_cudnn(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, n, dnn_int(l.groups * l.c),
                                           dnn_int(l.h), dnn_int(l.w)),
                "cudnnSetTensor4dDescriptor (input)");
    check_cudnn(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, dnn_int(l.groups * l.c_out),
                                           dnn_int(l.c), dnn_int(l.kernel), dnn_int(l.kernel)),
                "cudnnSetFilter4dDescriptor");
    check_cudnn(
        cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, n, dnn_int(l.groups * l.c_out),
                                   dnn_int(l.ho), dnn_int(l.wo)),
        "cudnnSetTensor4dDescriptor (output)");
    check_cudnn(cudnnSetConvolution2dDescriptor(conv, dnn_int(l.padding), dnn_int(l.padding),
                                                dnn_int(l.stride), dnn_int(l.stride), 1, 1,
                                                CUDNN_CROSS_CORRELATION, type),
                "cudnnSetConvolution2dDescriptor");
    check_cudnn(cudnnSetConvolutionGroupCount(conv, groups), "cudnnSetConvolutionGroupCount");
    check_cudnn(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
  }
  const cudnnConvolutionFwdAlgoPerf_t& forward() {
    if (!forward_algorithm) {
      int count = 0;
      cudnnConvolutionFwdAlgoPerf_t ranked[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(
                      dnn(), x, w, conv, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, ranked),
                  "cudnnGetConvolutionForwardAlgorithm_v7");
      forward_algorithm = choose(ranked, count, layout, "cuda::conv2d");
    }
    return *forward_algorithm;
  }
  const cudnnConvolutionBwdDataAlgoPerf_t& input_grad() {
    if (!input_grad_algorithm) {
      int count = 0;
      cudnnConvolutionBwdDataAlgoPerf_t ranked[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                      dnn(), w, y, conv, x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, ranked),
                  "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      input_grad_algorithm = choose(ranked, count, layout, "cuda::conv2d_input_grad");
    }
    return *input_grad_algorithm;
  }
  const cudnnConvolutionBwdFilterAlgoPerf_t& weight_grad() {
    if (!weight_grad_algorithm) {
      int count = 0;
      cudnnConvolutionBwdFilterAlgoPerf_t ranked[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      check_cudnn(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(
              dnn(), x, y, conv, w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, ranked),
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
      weight_grad_algorithm = choose(ranked, count, layout, "cuda::conv2d_weight_grad");
    }
    return *weight_grad_algorithm;
  }

  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
};

template <class T>
Plan& plan(const ConvLayout& l) {
  thread_local std::vector<std::pair<ConvLayout, std::unique_ptr<Plan>>> plans;
  for (const auto& [layout, p] : plans)
    if (layout == l) return *p;
  const cudnnDataType_t type = std::is_same_v<T, float> ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
  plans.emplace_back(l, std::make_unique<Plan>(l, type));
  return *plans.back().second;
}

// Device memory from the thread's cache for the length of one call.
struct Scratch {
  std::size_t bytes;
  void* data;
  explicit Scratch(std::size_t b) : bytes(b), data(b ? cuda::allocate(b) : nullptr) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (data) cuda::deallocate(data, bytes);
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Groups of several images are transposed between the library's
// [groups, n, ...] and cuDNN's [n, groups, ...].
bool transposes(const ConvLayout& l) {
  return l.groups > 1 && l.n > 1;
}

// dst [b, a, inner] = src [a, b, inner] with its first two axes swapped.
template <class T>
void swap_leading(const T* src, T* dst, std::int64_t a, std::int64_t b, std::int64_t inner) {
  CopyLayout l;
  l.rank = 3;
  l.dims[0] = a, l.dims[1] = b, l.dims[2] = inner;
  l.stride_src[0] = b * inner, l.stride_src[1] = inner, l.stride_src[2] = 1;
  l.stride_dst[0] = inner, l.stride_dst[1] = a * inner, l.stride_dst[2] = 1;
  cuda::strided_copy(src, dst, l);
}

// An input of the layout in cuDNN's order: x itself, or a transposed copy in `scratch`.
template <class T>
const T* in_cudnn_order(const T* x, std::int64_t per_image, const ConvLayout& l,
                        const Scratch& scratch) {
  if (!transposes(l)) return x;
  swap_leading(x, scratch.as<T>(), l.groups, l.n, per_image);
  return scratch.as<T>();
}

template <class T>
std::size_t bytes_if_transposed(const ConvLayout& l, std::int64_t per_image) {
  return transposes(l) ? static_cast<std::size_t>(l.groups * l.n * per_image) * sizeof(T) : 0;
}

template <class T>
void cudnn_conv2d(const ConvLayout& l, const T* x, const T* w, T* y) {
  Plan& p = plan<T>(l);
  const std::int64_t x_image = l.c * l.h * l.w, y_image = l.c_out * l.ho * l.wo;
  const Scratch xs(bytes_if_transposed<T>(l, x_image)), ys(bytes_if_transposed<T>(l, y_image));
  const auto& algorithm = p.forward();
  const Scratch workspace(algorithm.memory);
  const T one = 1, zero = 0;
  check_cudnn(cudnnConvolutionForward(dnn(), &one, p.x, in_cudnn_order(x, x_image, l, xs), p.w, w,
                                      p.conv, algorithm.algo, workspace.data, workspace.bytes,
                                      &zero, p.y, transposes(l) ? ys.as<T>() : y),
              "cudnnConvolutionForward");
  if (transposes(l)) swap_leading(ys.as<T>(), y, l.n, l.groups, y_image);
}

template <class T>
void cudnn_input_grad(const ConvLayout& l, const T* dy, const T* w, T* dx) {
  Plan& p = plan<T>(l);
  const std::int64_t x_image = l.c * l.h * l.w, y_image = l.c_out * l.ho * l.wo;
  const Scratch dys(bytes_if_transposed<T>(l, y_image)), dxs(bytes_if_transposed<T>(l, x_image));
  const auto& algorithm = p.input_grad();
  const Scratch workspace(algorithm.memory);
  const T one = 1, zero = 0;
  check_cudnn(
      cudnnConvolutionBackwardData(dnn(), &one, p.w, w, p.y, in_cudnn_order(dy, y_image, l, dys),
                                   p.conv, algorithm.algo, workspace.data, workspace.bytes, &zero,
                                   p.x, transposes(l) ? dxs.as<T>() : dx),
      "cudnnConvolutionBackwardData");
  if (transposes(l)) swap_leading(dxs.as<T>(), dx, l.n, l.groups, x_image);
}

template <class T>
void cudnn_weight_grad(const ConvLayout& l, const T* x, const T* dy, T* dw) {
  Plan& p = plan<T>(l);
  const std::int64_t x_image = l.c * l.h * l.w, y_image = l.c_out * l.ho * l.wo;
  const Scratch xs(bytes_if_transposed<T>(l, x_image)), dys(bytes_if_transposed<T>(l, y_image));
  const auto& algorithm = p.weight_grad();
  const Scratch workspace(algorithm.memory);
  const T one = 1, zero = 0;
  check_cudnn(
      cudnnConvolutionBackwardFilter(dnn(), &one, p.x, in_cudnn_order(x, x_image, l, xs), p.y,
                                     in_cudnn_order(dy, y_image, l, dys), p.conv, algorithm.algo,
                                     workspace.data, workspace.bytes, &zero, p.w, dw),
      "cudnnConvolutionBackwardFilter");
}

// ---- the GEMM engine ----

// dst [g, b, a, inner] = src [g, a, b, inner].
template <class T>
void swap_middle(const T* src, T* dst, std::int64_t g, std::int64_t a, std::int64_t b,
                 std::int64_t inner) {
  CopyLayout l;
  l.rank = 4;
  l.dims[0] = g, l.dims[1] = a, l.dims[2] = b, l.dims[3] = inner;
  l.stride_src[0] = a * b * inner, l.stride_src[1] = b * inner, l.stride_src[2] = inner;
  l.stride_dst[0] = a * b * inner, l.stride_dst[1] = inner, l.stride_dst[2] = a * inner;
  l.stride_src[3] = l.stride_dst[3] = 1;
  cuda::strided_copy(src, dst, l);
}

// The output gradient dy [g, n, C_out, Ho Wo] as [g, C_out, n, Ho Wo]: dy
// itself for one image per group, else a transposed copy in `scratch`.
template <class T>
const T* channels_first(const ConvLayout& l, const T* dy, const Scratch& scratch) {
  if (l.n == 1) return dy;
  swap_middle(dy, scratch.as<T>(), l.groups, l.n, l.c_out, l.ho * l.wo);
  return scratch.as<T>();
}

template <class T>
std::size_t bytes(std::int64_t count) {
  return static_cast<std::size_t>(count) * sizeof(T);
}

template <class T>
void gemm_conv2d(const ConvLayout& l, const T* x, const T* w, T* y) {
  const std::int64_t ckk = l.c * l.kernel * l.kernel, columns = l.n * l.ho * l.wo;
  const Scratch col(bytes<T>(l.groups * ckk * columns));
  const Scratch out(l.n > 1 ? bytes<T>(l.y_numel()) : 0);
  detail::im2col(l, x, col.as<T>());
  GemmLayout<T> g;  // y[g] = w[g] col[g]
  g.m = l.c_out, g.n = columns, g.k = ckk, g.batch = l.groups;
  g.stride_a = l.c_out * ckk, g.stride_b = ckk * columns, g.stride_c = l.c_out * columns;
  cuda::gemm(g, w, col.as<T>(), l.n > 1 ? out.as<T>() : y);
  if (l.n > 1) swap_middle(out.as<T>(), y, l.groups, l.c_out, l.n, l.ho * l.wo);
}

template <class T>
void gemm_input_grad(const ConvLayout& l, const T* dy, const T* w, T* dx) {
  const std::int64_t ckk = l.c * l.kernel * l.kernel, columns = l.n * l.ho * l.wo;
  const Scratch transposed(l.n > 1 ? bytes<T>(l.y_numel()) : 0);
  const Scratch col(bytes<T>(l.groups * ckk * columns));
  GemmLayout<T> g;  // dcol[g] = w[g]^T dy[g]
  g.trans_a = true;
  g.m = ckk, g.n = columns, g.k = l.c_out, g.batch = l.groups;
  g.stride_a = l.c_out * ckk, g.stride_b = l.c_out * columns, g.stride_c = ckk * columns;
  cuda::gemm(g, w, channels_first(l, dy, transposed), col.as<T>());
  detail::col2im(l, col.as<T>(), dx);
}

template <class T>
void gemm_weight_grad(const ConvLayout& l, const T* x, const T* dy, T* dw) {
  const std::int64_t ckk = l.c * l.kernel * l.kernel, columns = l.n * l.ho * l.wo;
  const Scratch transposed(l.n > 1 ? bytes<T>(l.y_numel()) : 0);
  const Scratch col(bytes<T>(l.groups * ckk * columns));
  detail::im2col(l, x, col.as<T>());
  GemmLayout<T> g;  // dw[g] = dy[g] col[g]^T
  g.trans_b = true;
  g.m = l.c_out, g.n = ckk, g.k = columns, g.batch = l.groups;
  g.stride_a = l.c_out * columns, g.stride_b = ckk * columns, g.stride_c = l.c_out * ckk;
  cuda::gemm(g, channels_first(l, dy, transposed), col.as<T>(), dw);
}

std::atomic<ConvolutionEngine> engine{ConvolutionEngine::automatic};

// Whether a call with this layout goes to the GEMM engine (see ConvolutionEngine).
bool by_gemm(const ConvLayout& l) {
  const ConvolutionEngine e = engine;
  return e == ConvolutionEngine::gemm || (e == ConvolutionEngine::automatic && l.groups > 4);
}

}  // namespace

void cuda::set_convolution_engine(ConvolutionEngine e) {
  engine = e;
}
ConvolutionEngine cuda::convolution_engine() {
  return engine;
}

// The bias [groups, c_out] is added by the elementwise kernel that adding it
// as an op would run, y [groups, n, c_out, Ho Wo] in place: the same sums.
template <class T>
void cuda::conv2d(const ConvLayout& l, const T* x, const T* w, const T* bias, T* y) {
  by_gemm(l) ? gemm_conv2d(l, x, w, y) : cudnn_conv2d(l, x, w, y);
  if (!bias) return;
  BroadcastLayout add{.rank = 4};
  add.dims = {l.groups, l.n, l.c_out, l.ho * l.wo};
  add.stride_a = {l.n * l.c_out * l.ho * l.wo, l.c_out * l.ho * l.wo, l.ho * l.wo, 1};
  add.stride_b = {l.c_out, 0, 1, 0};
  binary(BinaryOp::add, y, bias, y, add);
}
template <class T>
void cuda::conv2d_input_grad(const ConvLayout& l, const T* dy, const T* w, T* dx) {
  by_gemm(l) ? gemm_input_grad(l, dy, w, dx) : cudnn_input_grad(l, dy, w, dx);
}
template <class T>
void cuda::conv2d_weight_grad(const ConvLayout& l, const T* x, const T* dy, T* dw) {
  by_gemm(l) ? gemm_weight_grad(l, x, dy, dw) : cudnn_weight_grad(l, x, dy, dw);
}

#define PLATIPUS_INSTANTIATE(T)                                                        \
  template void cuda::conv2d<T>(const ConvLayout&, const T*, const T*, const T*, T*);  \
  template void cuda::conv2d_input_grad<T>(const ConvLayout&, const T*, const T*, T*); \
  template void cuda::conv2d_weight_grad<T>(const ConvLayout&, const T*, const T*, T*);
PLATIPUS_INSTANTIATE(float)
PLATIPUS_INSTANTIATE(double)
#undef PLATIPUS_INSTANTIATE

}  // namespace platipus
