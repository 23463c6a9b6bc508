//! The `__array_interface__` / `__cuda_array_interface__` dict parser against arbitrary
//! values: versions, shapes, typestrs (any bytes), data tuples, strides, masks, offsets and
//! streams.
//!
//! Properties: no panic; every refusal names the dict; an accepted layout has a dtype that
//! round-trips through its typestr, a non-zero stream, and passes the same extent check the
//! import then makes (so a layout can never be accepted here and describe impossible memory).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use zerohop::array_interface::{dtype_from_typestr, parse, Flavor, InterfaceFields};
use zerohop::tensor::validate_layout;

#[derive(Arbitrary, Debug)]
struct Input {
    cuda: bool,
    version: i64,
    shape: Vec<i64>,
    typestr: String,
    data: Option<(usize, bool)>,
    strides: Option<Vec<i64>>,
    has_mask: bool,
    offset: Option<i64>,
    stream: Option<i64>,
}

fuzz_target!(|input: Input| {
    let flavor = if input.cuda {
        Flavor::Cuda
    } else {
        Flavor::Host
    };
    let fields = InterfaceFields {
        version: input.version,
        shape: input.shape,
        typestr: input.typestr,
        data: input.data,
        strides: input.strides,
        has_mask: input.has_mask,
        offset: input.offset,
        stream: input.stream,
    };
    match parse(&fields, flavor) {
        Err(err) => {
            let text = err.to_string();
            assert!(
                text.contains("interface") || text.contains("shape"),
                "{text}"
            );
        }
        Ok(layout) => {
            assert_eq!(layout.shape, fields.shape);
            assert_eq!(layout.strides.len(), layout.shape.len());
            // A stream that was accepted is the one the dict named (never 0: the type says so).
            assert_eq!(
                layout.stream.map(|s| s.handle() as i64),
                fields.stream.filter(|_| layout.stream.is_some())
            );
            assert!(!layout.readonly || fields.data.is_some_and(|d| d.1));
            let again = dtype_from_typestr(&fields.typestr, "again").unwrap();
            assert_eq!(again, layout.dtype);
            // What TensorView::from_raw_parts checks next; it may refuse (a span past the
            // address space) but must not panic.
            let _ = validate_layout(
                layout.address as *const u8,
                layout.dtype,
                &layout.shape,
                &layout.strides,
            );
        }
    }
});
