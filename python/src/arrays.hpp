// NumPy arrays in and out of platipus tensors. An argument is read in place
// (a tensor view of its memory) when it is C-contiguous, else copied; it must
// hold the learner's dtype, in host memory. A learner on the GPU gets a
// device copy (on_backend). A result is a fresh NumPy array that owns a copy
// (plain new[]/delete[]: the array may outlive the learner and be freed on
// any thread); results are parameters, predictions and batches, one pass
// over memory beside the work that made them.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "platipus/tensor/tensor.hpp"

namespace platipus::python {

namespace nb = nanobind;

// Any array: every dtype, layout and device, read-only ones included; the
// checks below name what is wrong with it.
using Array = nb::ndarray<nb::ro>;

// `value` as an Array, argument `name` of `who`.
inline Array array_argument(nb::handle value, std::string_view who, std::string_view name) {
  Array array;
  check(nb::try_cast(value, array), who, "{} must be an array (NumPy, or any with DLPack), got {}",
        name, nb::str(value.type()).c_str());
  return array;
}

template <class T>
constexpr std::string_view dtype_name = std::is_same_v<T, float> ? "float32" : "float64";

inline std::string dtype_text(nb::dlpack::dtype d) {
  const char* kind = d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float)  ? "float"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int)  ? "int"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt) ? "uint"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool) ? "bool"
                                                                                         : "other";
  return fmt::format("{}{}", kind, static_cast<int>(d.bits));
}

// The tensor of `array`, argument `name` of `who`; `rank` 0 accepts any rank.
template <class T>
Tensor<T, cpu> tensor_of(const Array& array, std::string_view who, std::string_view name,
                         int rank = 0) {
  check(array.device_type() == nb::device::cpu::value, who,
        "{} must be an array in host memory (a NumPy array), got one on device type {}", name,
        array.device_type());
  check(array.dtype() == nb::dtype<T>(), who, "{} must be {} (this learner's dtype), got {}", name,
        dtype_name<T>, dtype_text(array.dtype()));
  check(array.ndim() <= static_cast<std::size_t>(max_rank), who, "{} has {} axes, more than {}",
        name, array.ndim(), max_rank);
  check(rank == 0 || static_cast<int>(array.ndim()) == rank, who, "{} must have {} axes, got {}",
        name, rank, array.ndim());
  Shape shape;
  for (std::size_t a = 0; a < array.ndim(); ++a)
    shape.push_back(static_cast<std::int64_t>(array.shape(a)));
  std::vector<std::int64_t> strides(array.ndim());  // in elements
  bool contiguous = true;
  for (std::int64_t a = static_cast<std::int64_t>(array.ndim()) - 1, expected = 1; a >= 0; --a) {
    const auto i = static_cast<std::size_t>(a);
    strides[i] = array.stride(i);
    contiguous = contiguous && (shape[static_cast<int>(a)] == 1 || strides[i] == expected);
    expected *= shape[static_cast<int>(a)];
  }
  T* data = const_cast<T*>(static_cast<const T*>(array.data()));
  if (contiguous) return Tensor<T, cpu>::view(data, shape);
  Tensor<T, cpu> copy(shape);
  T* out = copy.data();
  std::vector<std::int64_t> index(array.ndim(), 0);
  for (std::int64_t n = 0; n < shape.numel(); ++n) {
    std::int64_t offset = 0;
    for (std::size_t a = 0; a < index.size(); ++a) offset += index[a] * strides[a];
    out[n] = data[offset];
    for (std::int64_t a = static_cast<std::int64_t>(index.size()) - 1; a >= 0; --a) {
      const auto i = static_cast<std::size_t>(a);
      if (++index[i] < shape[static_cast<int>(a)]) break;
      index[i] = 0;
    }
  }
  return copy;
}

// A host tensor on backend B: itself (a view stays a view) on the CPU, a
// device copy otherwise.
template <class B, class T>
Tensor<T, B> on_backend(Tensor<T, cpu>&& tensor) {
  if constexpr (std::is_same_v<B, cpu>)
    return std::move(tensor);
  else
    return tensor.template to<B>();
}

// A copy of a host tensor on backend B, owning its memory.
template <class B, class T>
Tensor<T, B> copy_on_backend(const Tensor<T, cpu>& tensor) {
  if constexpr (std::is_same_v<B, cpu>)
    return tensor.clone();
  else
    return tensor.template to<B>();
}

template <class T>
using NumpyArray = nb::ndarray<nb::numpy, T>;

// A NumPy array holding a copy of `tensor` (from the device, on the GPU).
template <class T, class B>
NumpyArray<T> array_of(const Tensor<T, B>& tensor) {
  const auto n = static_cast<std::size_t>(tensor.numel());
  T* data = new T[n > 0 ? n : 1];
  if (n > 0) B::copy_to_host(data, tensor.data(), tensor.bytes());
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  std::vector<std::size_t> shape;
  for (int a = 0; a < tensor.rank(); ++a) shape.push_back(static_cast<std::size_t>(tensor.dim(a)));
  return NumpyArray<T>(data, shape.size(), shape.data(), owner);
}

}  // namespace platipus::python
