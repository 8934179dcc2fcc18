#include "wds/tensor.hpp"

#include <algorithm>
#include <cstring>
#include <new>

#include "wds/error.hpp"

namespace wds {

namespace {

constexpr std::size_t kAlignment = 64;

std::size_t count(const Tensor::Shape& shape) {
  std::size_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

}  // namespace

namespace detail {

void AlignedFree::operator()(std::byte* p) const noexcept {
  ::operator delete[](p, std::align_val_t{kAlignment});
}

AlignedBlock allocate_aligned(std::size_t nbytes) {
  const std::size_t n = std::max<std::size_t>(nbytes, 1);
  return AlignedBlock(static_cast<std::byte*>(::operator new[](n, std::align_val_t{kAlignment})));
}

}  // namespace detail

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::boolean:
    case DType::int8:
    case DType::uint8:
      return 1;
    case DType::int16:
    case DType::uint16:
    case DType::float16:
      return 2;
    case DType::int32:
    case DType::uint32:
    case DType::float32:
      return 4;
    case DType::int64:
    case DType::uint64:
    case DType::float64:
    case DType::complex64:
      return 8;
    case DType::complex128:
      return 16;
  }
  return 1;
}

std::string_view to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::boolean:
      return "bool";
    case DType::int8:
      return "int8";
    case DType::int16:
      return "int16";
    case DType::int32:
      return "int32";
    case DType::int64:
      return "int64";
    case DType::uint8:
      return "uint8";
    case DType::uint16:
      return "uint16";
    case DType::uint32:
      return "uint32";
    case DType::uint64:
      return "uint64";
    case DType::float16:
      return "float16";
    case DType::float32:
      return "float32";
    case DType::float64:
      return "float64";
    case DType::complex64:
      return "complex64";
    case DType::complex128:
      return "complex128";
  }
  return "?";
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (std::int64_t d : shape_) {
    if (d < 0) {
      throw Error::invalid_argument("tensor shape " + describe() + " has a negative dimension");
    }
  }
  detail::AlignedBlock block = detail::allocate_aligned(nbytes());
  data_ = block.get();
  storage_ = std::shared_ptr<std::byte[]>(std::move(block));
}

Tensor::Tensor(DType dtype, Shape shape, std::shared_ptr<const void> storage, std::byte* data)
    : dtype_(dtype), shape_(std::move(shape)), storage_(std::move(storage)), data_(data) {}

std::size_t Tensor::numel() const noexcept {
  return count(shape_);
}

void Tensor::check_dtype(DType wanted) const {
  if (wanted != dtype_) {
    throw Error::invalid_argument("tensor " + describe() + " read as " +
                                  std::string(to_string(wanted)));
  }
}

Tensor Tensor::operator[](std::int64_t i) const {
  if (shape_.empty() || i < 0 || i >= shape_[0]) {
    throw Error::invalid_argument("index " + std::to_string(i) + " is out of range for tensor " +
                                  describe());
  }
  Shape rest(shape_.begin() + 1, shape_.end());
  const std::size_t stride = count(rest) * dtype_size(dtype_);
  return Tensor(dtype_, std::move(rest), storage_, data_ + static_cast<std::size_t>(i) * stride);
}

Tensor Tensor::rows(std::int64_t begin, std::int64_t end) const {
  if (shape_.empty() || begin < 0 || begin > end || end > shape_[0]) {
    throw Error::invalid_argument("rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                                  ") are out of range for tensor " + describe());
  }
  Shape shape = shape_;
  shape[0] = end - begin;
  const std::size_t stride = count(Shape(shape_.begin() + 1, shape_.end())) * dtype_size(dtype_);
  return Tensor(dtype_, std::move(shape), storage_,
                data_ + static_cast<std::size_t>(begin) * stride);
}

Tensor Tensor::reshape(Shape shape) const {
  if (count(shape) != numel()) {
    Tensor wanted;
    wanted.dtype_ = dtype_;
    wanted.shape_ = shape;
    throw Error::invalid_argument("cannot reshape tensor " + describe() + " to " +
                                  wanted.describe());
  }
  return Tensor(dtype_, std::move(shape), storage_, data_);
}

Tensor Tensor::clone() const {
  Tensor out(dtype_, shape_);
  if (nbytes()) std::memcpy(out.data(), data_, nbytes());
  return out;
}

bool operator==(const Tensor& a, const Tensor& b) noexcept {
  return a.dtype_ == b.dtype_ && a.shape_ == b.shape_ &&
         (a.nbytes() == 0 || std::memcmp(a.data_, b.data_, a.nbytes()) == 0);
}

std::string Tensor::describe() const {
  std::string s(to_string(dtype_));
  s += '[';
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape_[i]);
  }
  s += ']';
  return s;
}

}  // namespace wds
