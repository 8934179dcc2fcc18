// wds/dlpack.hpp: hands wds tensors to other frameworks without a copy, through DLPack.
//
//   #include <wds/dlpack.hpp>              // needs dlpack/dlpack.h (Debian: libdlpack-dev)
//   DLManagedTensor* m = wds::to_dlpack(batch[0].get<wds::Tensor>());
//   torch::Tensor images = torch::fromDLPack(m);   // libtorch takes ownership, no copy
//   // CUDA: cudaMemcpyAsync(dev, m->dl_tensor.data, bytes, ...), then m->deleter(m).
//   // Python (pybind11): wrap m in a PyCapsule named "dltensor"; torch.from_dlpack(capsule).
//
// The DLManagedTensor keeps the tensor's storage alive until its deleter is called; whoever
// receives it calls the deleter exactly once (torch::fromDLPack does so when its tensor dies).
// Tensors are CPU memory, C-contiguous (strides are given explicitly all the same), 64-byte
// aligned. DLPack 0.6 has no boolean type: bool tensors export as uint8.
//
// This header is the only part of wds that includes dlpack.h, so only users of it need it.
// Thread safety: to_dlpack may be called from any thread on tensors not being modified.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "wds/error.hpp"
#include "wds/tensor.hpp"

namespace wds {

inline DLDataType to_dlpack_dtype(DType dtype) {
  const auto bits = static_cast<std::uint8_t>(dtype_size(dtype) * 8);
  switch (dtype) {
    case DType::int8:
    case DType::int16:
    case DType::int32:
    case DType::int64:
      return {kDLInt, bits, 1};
    case DType::boolean:
    case DType::uint8:
    case DType::uint16:
    case DType::uint32:
    case DType::uint64:
      return {kDLUInt, bits, 1};
    case DType::float16:
    case DType::float32:
    case DType::float64:
      return {kDLFloat, bits, 1};
    case DType::complex64:
    case DType::complex128:
      return {kDLComplex, bits, 1};
  }
  return {kDLUInt, 8, 1};
}

// A new DLManagedTensor viewing `tensor` (no copy of the elements); the receiver owns it.
inline DLManagedTensor* to_dlpack(const Tensor& tensor) {
  struct Context {
    Tensor tensor;  // holds the storage
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> strides;
    DLManagedTensor managed{};
  };
  auto ctx = std::make_unique<Context>();
  ctx->tensor = tensor;
  ctx->shape = tensor.shape();
  ctx->strides.assign(ctx->shape.size(), 1);
  for (std::size_t i = ctx->shape.size(); i-- > 1;) {
    ctx->strides[i - 1] = ctx->strides[i] * ctx->shape[i];
  }
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = tensor.data();
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<int>(ctx->shape.size());
  t.dtype = to_dlpack_dtype(tensor.dtype());
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = [](DLManagedTensor* self) {
    std::unique_ptr<Context> owned(static_cast<Context*>(self->manager_ctx));
  };
  return &ctx.release()->managed;
}

// Adopts a CPU, C-contiguous DLManagedTensor (calling its deleter when the last view of the
// returned tensor dies). Anything else is an invalid_argument Error (and m is left to the caller).
inline Tensor from_dlpack(DLManagedTensor* m) {
  const DLTensor& t = m->dl_tensor;
  auto fail = [](const char* why) {
    return Error::invalid_argument(std::string("from_dlpack: ") + why);
  };
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
    throw fail("the tensor is not in CPU memory");
  }
  if (t.dtype.lanes != 1) throw fail("vector dtypes (lanes > 1) are not supported");
  DType dtype;
  const int bits = t.dtype.bits;
  if (t.dtype.code == kDLInt && bits == 8)
    dtype = DType::int8;
  else if (t.dtype.code == kDLInt && bits == 16)
    dtype = DType::int16;
  else if (t.dtype.code == kDLInt && bits == 32)
    dtype = DType::int32;
  else if (t.dtype.code == kDLInt && bits == 64)
    dtype = DType::int64;
  else if (t.dtype.code == kDLUInt && bits == 8)
    dtype = DType::uint8;
  else if (t.dtype.code == kDLUInt && bits == 16)
    dtype = DType::uint16;
  else if (t.dtype.code == kDLUInt && bits == 32)
    dtype = DType::uint32;
  else if (t.dtype.code == kDLUInt && bits == 64)
    dtype = DType::uint64;
  else if (t.dtype.code == kDLFloat && bits == 16)
    dtype = DType::float16;
  else if (t.dtype.code == kDLFloat && bits == 32)
    dtype = DType::float32;
  else if (t.dtype.code == kDLFloat && bits == 64)
    dtype = DType::float64;
  else if (t.dtype.code == kDLComplex && bits == 64)
    dtype = DType::complex64;
  else if (t.dtype.code == kDLComplex && bits == 128)
    dtype = DType::complex128;
  else
    throw fail("unsupported dtype");
  Tensor::Shape shape(t.shape, t.shape + t.ndim);
  if (t.strides) {
    std::int64_t expect = 1;
    for (int i = t.ndim; i-- > 0;) {
      if (shape[static_cast<std::size_t>(i)] != 1 && t.strides[i] != expect) {
        throw fail("the tensor is not C-contiguous");
      }
      expect *= shape[static_cast<std::size_t>(i)];
    }
  }
  std::shared_ptr<DLManagedTensor> owner(m, [](DLManagedTensor* p) {
    if (p->deleter) p->deleter(p);
  });
  auto* data = static_cast<std::byte*>(t.data) + t.byte_offset;
  return Tensor(dtype, std::move(shape), std::move(owner), data);
}

}  // namespace wds
