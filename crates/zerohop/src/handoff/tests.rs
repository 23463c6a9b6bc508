//! The hand-off's rules, without a GPU (Miri runs these): stream conversions for each face,
//! `ready_on` for host data, the consumer plan for every consumer × layout × allowance, and
//! the consumer streams a block remembers for its free.

use std::sync::Arc;

use super::*;
use crate::buffer::Buffer;
use crate::device::{Device, DeviceKind};
use crate::dtype::DType;
use crate::error::Error;
use crate::memory::SystemResource;
use crate::tensor::TensorView;

const CUDA0: Device = Device {
    kind: DeviceKind::Cuda,
    id: 0,
};

fn handle(v: usize) -> CudaStream {
    CudaStream::from_handle(v).unwrap()
}

#[test]
fn dlpack_stream_values_convert_once_with_named_refusals() {
    let cases: [(Option<i64>, Result<ConsumerStream, &str>); 6] = [
        (None, Ok(ConsumerStream::Unnamed)),
        (Some(-1), Ok(ConsumerStream::Unordered)),
        (Some(1), Ok(ConsumerStream::On(CudaStream::LEGACY))),
        (Some(2), Ok(ConsumerStream::On(CudaStream::PER_THREAD))),
        (Some(0), Err("ambiguous")),
        (Some(-7), Err("not a CUDA stream")),
    ];
    for (value, expected) in cases {
        let got = ConsumerStream::from_dlpack(value, CUDA0);
        match (got, expected) {
            (Ok(g), Ok(e)) => assert_eq!(g, e, "{value:?}"),
            (Err(Error::Stream { reason, .. }), Err(words)) => {
                assert!(reason.contains(words), "{value:?}: {reason}")
            }
            (got, expected) => panic!("{value:?}: got {got:?}, expected {expected:?}"),
        }
    }
    assert_eq!(
        ConsumerStream::from_dlpack(Some(0xbeef), CUDA0).unwrap(),
        ConsumerStream::On(handle(0xbeef))
    );
}

#[test]
fn host_data_takes_no_stream_in_any_face() {
    let dlpack = ConsumerStream::from_dlpack(Some(5), Device::CPU).unwrap_err();
    let c = ConsumerStream::from_c(5, Device::CPU).unwrap_err();
    for err in [dlpack, c] {
        assert!(
            matches!(&err, Error::Stream { reason, .. } if reason.contains("has no streams")),
            "{err}"
        );
    }
    assert_eq!(
        ConsumerStream::from_dlpack(None, Device::CPU).unwrap(),
        ConsumerStream::Unnamed
    );
    assert_eq!(
        ConsumerStream::from_c(0, Device::CPU).unwrap(),
        ConsumerStream::Unnamed
    );
    // The C face has no "None": a CUDA consumer must name its stream.
    let err = ConsumerStream::from_c(0, CUDA0).unwrap_err();
    assert!(err.to_string().contains(AMBIGUOUS), "{err}");
    // A stream forged for host data is refused by ready_on itself too.
    let err = ready_on(
        Device::CPU,
        None,
        Stream::HOST,
        ConsumerStream::On(handle(9)),
    );
    assert!(matches!(err, Err(Error::Stream { .. })), "{err:?}");
    ready_on(Device::CPU, None, Stream::HOST, ConsumerStream::Unnamed).unwrap();
}

const AMBIGUOUS: &str = "stream 0 is ambiguous";

#[test]
fn the_consumer_stream_of_cuda_data_defaults_to_the_legacy_stream() {
    assert_eq!(ConsumerStream::Unnamed.for_cuda(), Some(CudaStream::LEGACY));
    assert_eq!(ConsumerStream::Unordered.for_cuda(), None);
    assert_eq!(
        ConsumerStream::On(handle(0x40)).for_cuda(),
        Some(handle(0x40))
    );
}

#[test]
fn allocator_streams_map_zero_to_the_null_stream_on_devices_and_to_none_on_the_host() {
    assert_eq!(Stream::from_allocator(CUDA0, 0), Stream::LEGACY);
    assert_eq!(Stream::from_allocator(CUDA0, 0x77).raw(), 0x77);
    assert_eq!(Stream::from_allocator(Device::CPU, 0x77), Stream::HOST);
    assert_eq!(Stream::HOST.raw(), 0);
    assert!(Stream::HOST.require_cuda().is_err());
    assert_eq!(Stream::LEGACY.require_cuda().unwrap(), CudaStream::LEGACY);
    assert_eq!(CudaStream::PER_THREAD.handle(), 2);
    assert_eq!(format!("{}", handle(0x10)), "stream 0x10");
}

#[test]
fn ready_on_cuda_data_with_the_same_stream_or_an_unordered_consumer_does_nothing() {
    // No driver call is needed (this machine may have no GPU): the streams match, or the
    // consumer orders itself, or nothing is known of the producer.
    ready_on(CUDA0, None, Stream::LEGACY, ConsumerStream::Unnamed).unwrap();
    ready_on(CUDA0, None, Stream::LEGACY, ConsumerStream::Unordered).unwrap();
    ready_on(CUDA0, None, Stream::HOST, ConsumerStream::On(handle(3))).unwrap();
}

/// A 4 × 3 float32 view over host memory, labelled as on `device` (the plan reads only the
/// layout and flags), strided or not, read-only or not, offset by `skew` bytes.
fn view(device: Device, strided: bool, readonly: bool, skew: usize, dtype: DType) -> TensorView {
    let block = Buffer::allocate(Arc::new(SystemResource::new()), 256, 128, Stream::HOST).unwrap();
    let (shape, strides) = if strided {
        (vec![4, 3], vec![1, 4])
    } else {
        (vec![4, 3], vec![3, 1])
    };
    // SAFETY: 12 elements of at most 8 bytes from `skew` <= 8 stay inside the 256-byte block,
    // which the owner keeps alive; nothing dereferences a view labelled as device memory.
    unsafe {
        TensorView::from_raw_parts(
            block.as_ptr().add(skew),
            dtype,
            shape,
            strides,
            device,
            block.owner(),
            readonly,
        )
    }
    .unwrap()
}

#[test]
fn every_consumer_layout_and_allowance_gets_one_answer() {
    let share = Ok(Plan::Share { vouched: false });
    let vouched = Ok(Plan::Share { vouched: true });
    let none = Allowance::default();
    let copy = Allowance {
        copy: true,
        share_readonly: false,
    };
    let word = Allowance {
        copy: false,
        share_readonly: true,
    };
    let ro = view(Device::CPU, false, true, 0, DType::F32);
    let rw = view(Device::CPU, false, false, 0, DType::F32);
    let strided = view(Device::CPU, true, false, 0, DType::F32);
    let skewed = view(Device::CPU, false, false, 4, DType::F32);
    let skewed_cuda = view(CUDA0, false, false, 4, DType::F32);
    let wide = view(Device::CPU, false, false, 0, DType::F64);
    let jax = Consumer::Jax { x64: false };
    let jax64 = Consumer::Jax { x64: true };
    let refused = |reason: CopyReason| -> Result<Plan, CopyReason> { Err(reason) };
    let copied = |reason: CopyReason| -> Result<Plan, CopyReason> { Ok(Plan::Copy(reason)) };
    let cases: Vec<(&TensorView, Consumer, Allowance, Result<Plan, CopyReason>)> = vec![
        (&ro, Consumer::Honouring, none, share.clone()),
        (
            &ro,
            Consumer::Torch,
            none,
            refused(CopyReason::ReadOnlyIgnored),
        ),
        (
            &ro,
            Consumer::Torch,
            copy,
            copied(CopyReason::ReadOnlyIgnored),
        ),
        (&ro, Consumer::Torch, word, vouched.clone()),
        (
            &ro,
            Consumer::LegacyDlpack,
            none,
            refused(CopyReason::ReadOnlyIgnored),
        ),
        (&rw, Consumer::Torch, none, share.clone()),
        (&ro, jax, none, vouched.clone()),
        (&ro, Consumer::Immutable, none, vouched.clone()),
        (&skewed, Consumer::Immutable, none, share.clone()),
        (&ro, Consumer::TensorFlow, none, vouched.clone()),
        (&strided, Consumer::Honouring, none, share.clone()),
        (&strided, Consumer::Torch, none, share.clone()),
        (
            &strided,
            Consumer::TensorFlow,
            none,
            refused(CopyReason::NotContiguous {
                strides: vec![1, 4],
            }),
        ),
        (
            &strided,
            Consumer::TensorFlow,
            copy,
            copied(CopyReason::NotContiguous {
                strides: vec![1, 4],
            }),
        ),
        (&strided, jax, none, share.clone()),
        (
            &skewed,
            jax,
            none,
            refused(CopyReason::JaxMisaligned {
                address: skewed.data_ptr() as usize,
            }),
        ),
        // On a GPU JAX takes any address.
        (&skewed_cuda, jax, none, share.clone()),
        (
            &wide,
            jax,
            copy,
            copied(CopyReason::JaxNarrows {
                dtype: "float64".into(),
                to: "float32".into(),
            }),
        ),
        (&wide, jax64, none, share.clone()),
        (&wide, Consumer::Torch, none, share),
    ];
    for (i, (view, consumer, allow, expected)) in cases.into_iter().enumerate() {
        let got = plan("x", view, consumer, allow);
        match (got, expected) {
            (Ok(g), Ok(e)) => assert_eq!(g, e, "case {i}: {consumer:?} {allow:?}"),
            (Err(Error::HandOff { tensor, reason }), Err(e)) => {
                assert_eq!(tensor, "x");
                assert_eq!(reason, e, "case {i}");
            }
            (got, expected) => panic!("case {i}: got {got:?}, expected {expected:?}"),
        }
    }
}

#[test]
fn a_refusal_names_the_tensor_the_reason_and_the_options() {
    let ro = view(Device::CPU, false, true, 0, DType::F32);
    let err = plan("pt", &ro, Consumer::Torch, Allowance::default()).unwrap_err();
    let text = err.to_string();
    for words in [
        "\"pt\"",
        "read-only",
        "torch ignores",
        "copy=True",
        "share_readonly=True",
    ] {
        assert!(text.contains(words), "{words}: {text}");
    }
}

#[test]
fn a_consumer_that_copied_silently_is_reported_or_refused() {
    let v = view(Device::CPU, false, false, 0, DType::F32);
    let at = v.data_ptr() as usize;
    let allow = Allowance {
        copy: true,
        share_readonly: false,
    };
    assert_eq!(
        check_shared("x", &v, "JAX", at, Allowance::default()).unwrap(),
        None
    );
    let copied = check_shared("x", &v, "JAX", at + 64, allow).unwrap();
    assert_eq!(
        copied,
        Some(CopyReason::ConsumerCopied {
            consumer: "JAX".into()
        })
    );
    let err = check_shared("x", &v, "JAX", at + 64, Allowance::default()).unwrap_err();
    assert!(err.to_string().contains("JAX copied it"), "{err}");
}

#[test]
fn consumers_are_named_as_callers_name_them() {
    assert_eq!(Consumer::named(None, false).unwrap(), Consumer::Honouring);
    assert_eq!(
        Consumer::named(Some("libtorch"), false).unwrap(),
        Consumer::Torch
    );
    assert_eq!(
        Consumer::named(Some("jax"), true).unwrap(),
        Consumer::Jax { x64: true }
    );
    let err = Consumer::named(Some("mxnet"), false).unwrap_err();
    assert!(err.to_string().contains("\"mxnet\""), "{err}");
}

#[test]
fn a_block_remembers_its_consumer_streams_through_slices_of_it() {
    let block = Buffer::allocate(Arc::new(SystemResource::new()), 64, 64, Stream::HOST).unwrap();
    // SAFETY: a slice of a live block, kept alive through its owner.
    let slice = unsafe {
        Buffer::from_foreign(
            std::ptr::NonNull::new(block.as_ptr()).unwrap(),
            32,
            Device::CPU,
            block.owner(),
        )
    };
    Buffer::note_consumer(&slice.owner(), handle(0x51));
    Buffer::note_consumer(&block.owner(), handle(0x51));
    Buffer::note_consumer(&block.owner(), handle(0x52));
    assert_eq!(block.consumers(), vec![handle(0x51), handle(0x52)]);
    assert!(
        slice.consumers().is_empty(),
        "the slice owns nothing to free"
    );
    for s in 0x60..0x70 {
        Buffer::note_consumer(&block.owner(), handle(s));
    }
    assert_eq!(block.consumers().len(), 8, "bounded");
    assert_eq!(block.consumers()[7], handle(0x6f), "the newest kept");
    // A view made over the whole block keeps it as a `Buffer`: noted all the same.
    let view = TensorView::from_buffer(block.clone(), DType::F32, &[16]).unwrap();
    Buffer::note_consumer(view.owner(), handle(0x99));
    assert_eq!(block.consumers()[7], handle(0x99));
    // An owner that is not a zerohop block is left alone.
    let foreign: crate::buffer::Owner = Arc::new(5_u8);
    Buffer::note_consumer(&foreign, handle(0x51));
}
