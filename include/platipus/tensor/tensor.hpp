// Tensor<T, B>: a contiguous, row-major n-d array on backend B. It owns its
// buffer, or is a view of another tensor's buffer (`view`), which must then
// outlive it; the tape uses views for free reshapes of values it keeps
// alive. Moves are cheap (a pointer and the inline shape); copies are
// explicit (`clone`), so that no buffer is duplicated by accident.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "platipus/backend/concept.hpp"
#include "platipus/backend/cpu/cpu.hpp"
#include "platipus/core/error.hpp"
#include "platipus/core/shape.hpp"

namespace platipus {

template <class T, class B = cpu>
class Tensor {
 public:
  using value_type = T;
  using backend = B;

  Tensor() = default;
  // Uninitialised storage of the given shape.
  explicit Tensor(const Shape& shape) : shape_(shape) {
    if (numel() > 0) data_ = static_cast<T*>(B::allocate(bytes()));
  }

  static Tensor full(const Shape& shape, T value) {
    Tensor t(shape);
    if constexpr (std::is_floating_point_v<T>) {
      B::fill(t.data(), t.numel(), value);
    } else {
      t.assign(std::vector<T>(static_cast<std::size_t>(t.numel()), value));
    }
    return t;
  }
  static Tensor zeros(const Shape& shape) { return full(shape, T(0)); }
  static Tensor ones(const Shape& shape) { return full(shape, T(1)); }
  static Tensor scalar(T value) { return full(Shape{}, value); }
  // [n] holding 0, 1, ..., n - 1, made on the backend (no host copy).
  static Tensor arange(std::int64_t n) {
    Tensor t(Shape{n});
    if (n > 0) B::arange(t.data(), n);
    return t;
  }
  // Copies host values into a new tensor; `values` must hold shape.numel() items.
  static Tensor from_host(const Shape& shape, std::span<const T> values) {
    check(static_cast<std::int64_t>(values.size()) == shape.numel(), "Tensor::from_host",
          "{} values given for shape {} ({} elements)", values.size(), shape, shape.numel());
    Tensor t(shape);
    t.assign(values);
    return t;
  }
  static Tensor from_host(const Shape& shape, std::initializer_list<T> values) {
    return from_host(shape, std::span<const T>(values.begin(), values.size()));
  }

  // A non-owning tensor over `data` (numel(shape) elements), e.g. another
  // tensor's buffer under a new shape.
  static Tensor view(T* data, const Shape& shape) {
    Tensor t;
    t.data_ = data;
    t.shape_ = shape;
    t.owns_ = false;
    return t;
  }
  static Tensor view(const Tensor& of, const Shape& shape) {
    check(shape.numel() == of.numel(), "reshape", "cannot view {} as {}", of.shape(), shape);
    return view(const_cast<T*>(of.data()), shape);
  }

  Tensor(Tensor&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), shape_(other.shape_), owns_(other.owns_) {}
  Tensor& operator=(Tensor&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      shape_ = other.shape_;
      owns_ = other.owns_;
    }
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { release(); }

  Tensor clone() const {
    Tensor t(shape_);
    B::copy(t.data_, data_, bytes());
    return t;
  }

  // The same elements under another shape of equal size; consumes *this.
  Tensor reshaped(const Shape& shape) && {
    check(shape.numel() == numel(), "reshape", "cannot reshape {} into {}", shape_, shape);
    Tensor t(std::move(*this));
    t.shape_ = shape;
    return t;
  }

  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  std::int64_t numel() const { return shape_.numel(); }
  std::int64_t dim(int axis) const { return shape_.dim(axis); }
  bool empty() const { return data_ == nullptr; }
  bool is_view() const { return !owns_; }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * sizeof(T); }

  // Frees the buffer (a view lets go of it) and keeps the shape: what the
  // tape leaves of a value that no one will read again.
  void release_buffer() { release(); }

  T* data() { return data_; }
  const T* data() const { return data_; }

  // Host copies of the elements (a device-to-host transfer on device backends).
  std::vector<T> to_vector() const {
    std::vector<T> out(static_cast<std::size_t>(numel()));
    if (!out.empty()) B::copy_to_host(out.data(), data_, bytes());
    return out;
  }
  T item() const {
    check(numel() == 1, "Tensor::item", "tensor of shape {} is not a single value", shape_);
    T v;
    B::copy_to_host(&v, data_, sizeof(T));
    return v;
  }
  void assign(std::span<const T> values) {
    check(static_cast<std::int64_t>(values.size()) == numel(), "Tensor::assign",
          "{} values for shape {}", values.size(), shape_);
    if (!values.empty()) B::copy_from_host(data_, values.data(), bytes());
  }

  // The same values on another backend.
  template <class Other>
  Tensor<T, Other> to() const {
    return Tensor<T, Other>::from_host(shape_, to_vector());
  }

 private:
  void release() {
    if (data_ && owns_) B::deallocate(data_, bytes());
    data_ = nullptr;
  }

  T* data_ = nullptr;
  Shape shape_;
  bool owns_ = true;
};

// Row-major contiguous strides of a shape.
inline Strides contiguous_strides(const Shape& shape) {
  Strides s{};
  std::int64_t stride = 1;
  for (int a = shape.rank() - 1; a >= 0; --a) {
    s[static_cast<std::size_t>(a)] = stride;
    stride *= shape[a];
  }
  return s;
}

}  // namespace platipus
