// wds/opencv.hpp: views and copies between wds::Tensor and cv::Mat, for code that uses OpenCV
// itself. Header-only: including it needs OpenCV's core module; the library itself does not.
//
//   wds::Tensor img = wds::decode_image(bytes, wds::parse_image_spec("bgr8"));
//   cv::Mat m = wds::to_mat(img);                  // a view: no copy
//   cv::GaussianBlur(m, m, {5, 5}, 0);             // changes img too
//   wds::Tensor copy = wds::from_mat(m(roi));      // a copy, uint8 HxWx3
//
// Neither function changes the channel order: to_mat of an rgb8 tensor is an RGB Mat, though
// OpenCV's functions (cvtColor, imshow, imwrite) take colour Mats to be BGR. Decode with the
// bgr8 spec to get OpenCV's order, or convert.
//
// Thread safety: as for Tensor and cv::Mat (one thread per object; shared pixels may be read
// from several threads).
#pragma once

#include <climits>
#include <cstdint>
#include <string>

#include <opencv2/core.hpp>

#include "wds/error.hpp"
#include "wds/tensor.hpp"

namespace wds {

namespace opencv_detail {

// OpenCV's depth for a dtype; -1 if OpenCV has none.
inline int depth_of(DType dtype) noexcept {
  switch (dtype) {
    case DType::uint8:
      return CV_8U;
    case DType::int8:
      return CV_8S;
    case DType::uint16:
      return CV_16U;
    case DType::int16:
      return CV_16S;
    case DType::int32:
      return CV_32S;
    case DType::float16:
      return CV_16F;
    case DType::float32:
      return CV_32F;
    case DType::float64:
      return CV_64F;
    default:
      return -1;
  }
}

inline bool dtype_of_depth(int depth, DType& dtype) noexcept {
  switch (depth) {
    case CV_8U:
      dtype = DType::uint8;
      return true;
    case CV_8S:
      dtype = DType::int8;
      return true;
    case CV_16U:
      dtype = DType::uint16;
      return true;
    case CV_16S:
      dtype = DType::int16;
      return true;
    case CV_32S:
      dtype = DType::int32;
      return true;
    case CV_16F:
      dtype = DType::float16;
      return true;
    case CV_32F:
      dtype = DType::float32;
      return true;
    case CV_64F:
      dtype = DType::float64;
      return true;
    default:
      return false;
  }
}

}  // namespace opencv_detail

// A cv::Mat over the elements of an HxW (one channel) or HxWxC (C channels, C <= CV_CN_MAX)
// tensor of uint8, float32 or another dtype OpenCV has (int8, uint16, int16, int32, float16,
// float64). No copy: writes through the Mat change the tensor, and the Mat does not keep the
// tensor's storage alive (keep a Tensor sharing it for as long as the Mat is used). A Mat that
// OpenCV reallocates (an output of another size or type) no longer refers to the tensor.
// Errors: invalid_argument for other dtypes and shapes (e.g. CxHxW planes: use t[c] per plane).
inline cv::Mat to_mat(const Tensor& t) {
  const int depth = opencv_detail::depth_of(t.dtype());
  const auto& shape = t.shape();
  const bool shape_ok =
      (shape.size() == 2 || (shape.size() == 3 && shape[2] >= 1 && shape[2] <= CV_CN_MAX)) &&
      shape[0] <= INT_MAX && shape[1] <= INT_MAX;
  if (depth < 0 || !shape_ok) {
    throw Error::invalid_argument(
        "cannot view a " + t.describe() +
        " tensor as a cv::Mat (use HxW or HxWxC of uint8, float32 or another "
        "OpenCV depth)");
  }
  const int channels = shape.size() == 2 ? 1 : static_cast<int>(shape[2]);
  return cv::Mat(static_cast<int>(shape[0]), static_cast<int>(shape[1]),
                 CV_MAKETYPE(depth, channels), t.data());
}

// A tensor with a copy of `m`'s elements, same element type and channel order: HxW for one
// channel, HxWxC for C channels. `m` may be a region of a larger Mat (non-contiguous rows).
// Errors: invalid_argument for a Mat with more than two dimensions or an element type that has
// no DType.
inline Tensor from_mat(const cv::Mat& m) {
  DType dtype{};
  if (m.dims > 2 || !opencv_detail::dtype_of_depth(m.depth(), dtype)) {
    throw Error::invalid_argument("cannot copy a cv::Mat of type " + cv::typeToString(m.type()) +
                                  " with " + std::to_string(m.dims) + " dimensions to a tensor");
  }
  const int channels = m.channels();
  Tensor::Shape shape{m.rows, m.cols};
  if (channels > 1) shape.push_back(channels);
  Tensor out(dtype, std::move(shape));
  if (!m.empty()) {
    cv::Mat dst(m.rows, m.cols, m.type(), out.data());
    m.copyTo(dst);
  }
  return out;
}

}  // namespace wds
