// wds/tensor.hpp: Tensor, a dense n-dimensional array (decoded images, npy arrays, batches).
//
//   wds::Tensor t(wds::DType::uint8, {224, 224, 3});   // uninitialised, C order, 64-byte aligned
//   std::span<std::uint8_t> px = t.values<std::uint8_t>();
//   wds::Tensor row = batch[3];                          // a view: shares batch's storage
//   wds::Tensor head = batch.rows(0, 8);                 // rows 0..7, a view too
//
// A tensor is always contiguous in C (row-major) order: readers convert Fortran-order or
// byte-swapped input once, so consumers never check strides. Copies share the storage (as
// torch and numpy arrays do); clone() makes a deep copy. Views (operator[], reshape) keep the
// storage alive. Export to other frameworks without a copy: wds/dlpack.hpp.
//
// Thread safety: a tensor object is used by one thread at a time; tensors sharing storage may be
// read from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace wds {

// Element types, NumPy's numeric dtypes.
enum class DType : std::uint8_t {
  boolean,
  int8,
  int16,
  int32,
  int64,
  uint8,
  uint16,
  uint32,
  uint64,
  float16,
  float32,
  float64,
  complex64,
  complex128,
};

// Bytes per element.
std::size_t dtype_size(DType dtype) noexcept;
// NumPy's name: "uint8", "float32", "bool", ...
std::string_view to_string(DType dtype) noexcept;

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, bool>)
    return DType::boolean;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return DType::int8;
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return DType::int16;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DType::int32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return DType::int64;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return DType::uint8;
  else if constexpr (std::is_same_v<T, std::uint16_t>)
    return DType::uint16;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return DType::uint32;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return DType::uint64;
  else if constexpr (std::is_same_v<T, float>)
    return DType::float32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::float64;
  else
    static_assert(sizeof(T) == 0, "no DType for this element type");
}

namespace detail {
// Tensor storage blocks: 64-byte aligned (a cache line, and what SIMD kernels and DLPack
// consumers like to see), never zero bytes, so that data() of an empty tensor is still valid.
// Shared with TensorPool (wds/tensor_pool.hpp), which recycles them.
struct AlignedFree {
  void operator()(std::byte* p) const noexcept;
};
using AlignedBlock = std::unique_ptr<std::byte[], AlignedFree>;
// A block of at least max(nbytes, 1) bytes; throws std::bad_alloc.
AlignedBlock allocate_aligned(std::size_t nbytes);
}  // namespace detail

class Tensor {
 public:
  using Shape = std::vector<std::int64_t>;

  // An empty tensor: defined() is false.
  Tensor() = default;
  // Uninitialised storage for a tensor of this type and shape; throws invalid_argument for a
  // negative dimension.
  Tensor(DType dtype, Shape shape);
  // Adopts `storage` (at least nbytes from data) without copying; `data` points into it.
  Tensor(DType dtype, Shape shape, std::shared_ptr<const void> storage, std::byte* data);

  bool defined() const noexcept { return data_ != nullptr || !shape_.empty(); }
  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  std::size_t ndim() const noexcept { return shape_.size(); }
  std::int64_t dim(std::size_t i) const { return shape_.at(i); }
  std::size_t numel() const noexcept;
  std::size_t nbytes() const noexcept { return numel() * dtype_size(dtype_); }

  std::byte* data() const noexcept { return data_; }
  std::span<std::byte> bytes() const noexcept { return {data_, nbytes()}; }
  // The elements; throws invalid_argument if T is not the tensor's dtype.
  template <class T>
  std::span<T> values() const {
    check_dtype(dtype_of<std::remove_const_t<T>>());
    return {reinterpret_cast<T*>(data_), numel()};
  }

  // Element i along the first dimension, as a view of rank ndim() - 1.
  Tensor operator[](std::int64_t i) const;
  // Elements [begin, end) along the first dimension, as a view of the same rank (torch's
  // narrow(0, begin, end - begin)); throws invalid_argument unless 0 <= begin <= end <= dim(0).
  Tensor rows(std::int64_t begin, std::int64_t end) const;
  // The same elements with another shape of the same element count, as a view.
  Tensor reshape(Shape shape) const;
  // A deep copy in fresh storage.
  Tensor clone() const;
  // Same dtype, shape and elements.
  friend bool operator==(const Tensor& a, const Tensor& b) noexcept;

  // The owner of the elements, for exporters that must keep them alive (DLPack).
  const std::shared_ptr<const void>& storage() const noexcept { return storage_; }
  // "uint8[224, 224, 3]"
  std::string describe() const;

 private:
  void check_dtype(DType wanted) const;

  DType dtype_ = DType::uint8;
  Shape shape_;
  std::shared_ptr<const void> storage_;
  std::byte* data_ = nullptr;
};

}  // namespace wds
