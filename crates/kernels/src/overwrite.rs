//! Rewriting a device tensor's contents in its own buffer: the inputs of a recorded step, which
//! every replay reads from the buffers it was recorded with.

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::bytes::Bytes;

use crate::launch::has_fused_kernels;

#[backend_extension(Cube)]
pub trait OverwriteOps: Backend {
    /// `dst` with `values` (as many f32 as it holds), written into its own buffer when it is
    /// contiguous.
    fn overwrite_f32(dst: FloatTensor<Self>, values: Vec<f32>) -> FloatTensor<Self>;
    /// The same for a u32 tensor (token ids).
    fn overwrite_u32(dst: IntTensor<Self>, values: Vec<u32>) -> IntTensor<Self>;
}

impl OverwriteOps for CubeBackend {
    fn overwrite_f32(dst: CubeTensor, values: Vec<f32>) -> CubeTensor {
        // The Vec becomes the upload as it is: no copy on the decode path.
        let bytes = Bytes::from_elems(values);
        if dst.is_contiguous() {
            dst.client.write(&dst.handle, bytes);
            return dst;
        }
        let handle = dst.client.create(bytes);
        CubeTensor::new_contiguous(dst.client.clone(), dst.device.clone(), dst.meta.shape().clone(), handle, DType::F32)
    }

    fn overwrite_u32(dst: CubeTensor, values: Vec<u32>) -> CubeTensor {
        let bytes = Bytes::from_elems(values);
        if dst.is_contiguous() {
            dst.client.write(&dst.handle, bytes);
            return dst;
        }
        let handle = dst.client.create(bytes);
        CubeTensor::new_contiguous(dst.client.clone(), dst.device.clone(), dst.meta.shape().clone(), handle, DType::U32)
    }
}

/// Replaces `t`'s values by `values` (row-major, as many as it holds). On the cubecl backends the
/// values go into `t`'s own buffer (a contiguous one), whoever else holds it; elsewhere `t`
/// becomes a new tensor.
pub fn overwrite<const D: usize>(t: &mut Tensor<D>, values: Vec<f32>) {
    let shape = t.shape();
    assert_eq!(values.len(), shape.num_elements(), "overwrite: {} values for {shape:?}", values.len());
    let device = t.device();
    if has_fused_kernels(&device) {
        let dst = t.clone().into_dispatch();
        *t = Tensor::from_dispatch(<Dispatch as OverwriteOps>::overwrite_f32(dst, values));
    } else {
        *t = Tensor::from_data(TensorData::new(values, shape), &device);
    }
}

/// Replaces the token ids `ids` (u32, `[n]`) by `values`, as [`overwrite`] does.
pub fn overwrite_ids(ids: &mut Tensor<1, Int>, values: Vec<u32>) {
    assert_eq!(values.len(), ids.dims()[0], "overwrite_ids: {} ids for {:?}", values.len(), ids.dims());
    let device = ids.device();
    if has_fused_kernels(&device) {
        let dst = ids.clone().into_dispatch();
        *ids = Tensor::from_dispatch(<Dispatch as OverwriteOps>::overwrite_u32(dst, values));
    } else {
        let n = values.len();
        *ids = Tensor::from_data(TensorData::new(values, [n]), (&device, DType::U32));
    }
}
