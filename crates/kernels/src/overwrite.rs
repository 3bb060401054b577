//! Rewriting a device tensor's contents in its own buffer: the inputs of a recorded step, which
//! every replay reads from the buffers it was recorded with. And reading chosen ids back with the
//! copy submitted at once, ahead of whatever is launched next (the decode loop's lagged readback).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::bytes::Bytes;
use cubecl::prelude::*;

use crate::launch::has_fused_kernels;

#[backend_extension(Cube)]
pub trait OverwriteOps: Backend {
    /// `dst` with `values` (as many f32 as it holds), written into its own buffer when it is
    /// contiguous.
    fn overwrite_f32(dst: FloatTensor<Self>, values: Vec<f32>) -> FloatTensor<Self>;
    /// The same for a u32 tensor (token ids).
    fn overwrite_u32(dst: IntTensor<Self>, values: Vec<u32>) -> IntTensor<Self>;
    /// `src` (token ids, i32 or u32: the same bits for an id) copied into `dst`'s own buffer
    /// (u32, contiguous, as many ids) on the device; returns `dst`.
    fn copy_ids_into(dst: IntTensor<Self>, src: IntTensor<Self>) -> IntTensor<Self>;
    /// Starts reading `ids` back: the copy is encoded and submitted now; the future waits for it.
    fn read_ids_now(ids: IntTensor<Self>) -> IdsReading;
}

/// Ids on their way back from the device (`Err`: the device's message).
pub type IdsReading = Pin<Box<dyn Future<Output = Result<Vec<i64>, String>> + Send>>;

#[cube(launch)]
fn copy_ids_kernel(src: &[u32], dst: &mut [u32], n: u32) {
    if UNIT_POS_X < n {
        dst[UNIT_POS_X as usize] = src[UNIT_POS_X as usize];
    }
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

    fn copy_ids_into(dst: CubeTensor, src: CubeTensor) -> CubeTensor {
        let src = burn_cubecl::kernel::into_contiguous(src);
        let n = src.meta.shape().num_elements() as u32;
        assert!(n <= 256, "copy_ids_into: {n} ids (one workgroup copies at most 256)");
        assert!(matches!(src.dtype, DType::I32 | DType::U32), "copy_ids_into: ids of {:?}", src.dtype);
        crate::launch::declare_reads_of(&[&src]);
        copy_ids_kernel::launch(
            &src.client.clone(),
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(n.max(1)),
            src.into_buffer_arg(),
            dst.clone().into_buffer_arg(),
            n,
        );
        dst
    }
    fn read_ids_now(ids: CubeTensor) -> IdsReading {
        let ids = burn_cubecl::kernel::into_contiguous(ids);
        let (dtype, shape) = (ids.dtype, ids.meta.shape().clone());
        let descriptor = cubecl::server::CopyDescriptor::new(
            ids.handle.clone().binding(),
            shape.clone(),
            ids.meta.strides().clone(),
            ids.elem_size(),
        );
        // `read_one_tensor_async` encodes the copy and flushes the stream before it returns (a
        // lazy read, Burn's native default, would copy only when the bytes are first touched);
        // polled once here, so that happens now.
        let client = ids.client.clone();
        polled_once(async move {
            let bytes = client.read_one_tensor_async(descriptor).await.map_err(|err| err.to_string())?;
            Ok(TensorData::from_bytes(bytes, shape, dtype).iter::<i64>().collect())
        })
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

/// Replaces the token ids `ids` (u32, `[n]`) by `chosen` (ids chosen on the device, `[n]`), on
/// the device: a recorded step reads the id the last step sampled without the host seeing it.
/// Elsewhere `ids` becomes `chosen` as u32.
pub fn copy_ids_into(ids: &mut Tensor<1, Int>, chosen: Tensor<1, Int>) {
    assert_eq!(ids.dims(), chosen.dims(), "copy_ids_into: shapes differ");
    let device = ids.device();
    let chosen_dtype = chosen.dtype();
    if has_fused_kernels(&device) && matches!(chosen_dtype, DType::I32 | DType::U32) {
        let dst = ids.clone().into_dispatch();
        *ids = Tensor::from_dispatch(<Dispatch as OverwriteOps>::copy_ids_into(dst, chosen.into_dispatch()));
    } else if has_fused_kernels(&device) {
        let chosen = chosen.cast(DType::U32);
        let dst = ids.clone().into_dispatch();
        *ids = Tensor::from_dispatch(<Dispatch as OverwriteOps>::copy_ids_into(dst, chosen.into_dispatch()));
    } else {
        *ids = chosen.cast(DType::U32);
    }
}

/// `future` polled once now (what it does before its first wait runs here), to be awaited later.
fn polled_once<T: Send + 'static>(
    future: impl Future<Output = T> + Send + 'static,
) -> Pin<Box<dyn Future<Output = T> + Send>> {
    let mut future = Box::pin(future);
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => Box::pin(std::future::ready(out)),
        Poll::Pending => future,
    }
}

/// Starts reading the ids `ids` back. On the cubecl backends the copy is encoded and submitted
/// before this returns, so work launched after it does not delay it; the future then waits only
/// for the copy. (Elsewhere the read starts when the future is first polled.)
pub fn read_ids_now<const D: usize>(ids: Tensor<D, Int>) -> IdsReading {
    if has_fused_kernels(&ids.device()) {
        return <Dispatch as OverwriteOps>::read_ids_now(ids.into_dispatch());
    }
    Box::pin(async move {
        let data = ids.into_data_async().await.map_err(|err| err.to_string())?;
        Ok(data.iter::<i64>().collect())
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;

    /// An id chosen on the device (an argmax, in the backend's own int type) lands in a u32 id
    /// buffer that a recording keeps reading: the same buffer, holding the chosen id.
    fn chosen_id_lands_in_the_buffer(device: &Device) {
        let mut ids = Tensor::<1, Int>::from_data(TensorData::new(vec![7u32], [1]), (device, DType::U32));
        let logits = Tensor::<2>::from_data(TensorData::new(vec![0.0f32, 3.0, 9.0, 1.0, -2.0], [1, 5]), device);
        let chosen = logits.argmax(1).reshape([1]);
        let held = ids.clone();
        copy_ids_into(&mut ids, chosen);
        let read =
            |t: Tensor<1, Int>| pollster::block_on(t.into_data_async()).unwrap().iter::<i64>().collect::<Vec<_>>();
        assert_eq!(read(ids.clone()), vec![2]);
        assert_eq!(pollster::block_on(read_ids_now(ids.clone())), Ok(vec![2]));
        assert_eq!(ids.dtype(), DType::U32);
        if has_fused_kernels(device) {
            assert_eq!(read(held), vec![2], "the id is written into the buffer the recording holds");
        }
    }

    #[test]
    fn a_chosen_id_is_copied_on_the_cpu() {
        chosen_id_lands_in_the_buffer(&Device::flex());
    }

    #[test]
    fn a_chosen_id_is_copied_on_the_gpu() {
        let Some(gpu) = crate::launch::test_gpu() else { return };
        chosen_id_lands_in_the_buffer(&gpu);
    }
}
