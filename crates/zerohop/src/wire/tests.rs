//! The wire format's checks, on host memory (Miri runs these).

use super::*;
use crate::soa::{Schema, SoaTable};
use crate::tensor::TensorView;

fn bytes_of(view: &TensorView) -> (TensorState, Buffer) {
    let (state, start) = TensorState::of(view, false).unwrap();
    let buffer = Buffer::zeroed_host(state.nbytes, 64).unwrap();
    // SAFETY: `start..start + nbytes` is the view's live span; the buffer is fresh.
    unsafe { std::ptr::copy_nonoverlapping(start, buffer.as_ptr(), state.nbytes) };
    (state, buffer)
}

#[test]
fn a_tensor_travels_with_its_strides_and_comes_back_equal() {
    let t = TensorView::zeros(DType::F64, &[3, 4]).unwrap();
    // SAFETY: the fresh tensor's own elements, no other view of them alive.
    let values = unsafe { t.as_mut_slice::<f64>() }.unwrap();
    values
        .iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = i as f64);
    let t = t.transpose(0, 1).unwrap();
    let (state, buffer) = bytes_of(&t);
    assert_eq!(
        (state.shape.clone(), state.strides.clone()),
        (vec![4, 3], vec![1, 4])
    );
    let (back, copied) = state.view_over(buffer, true).unwrap();
    assert!(!copied && !back.is_readonly());
    assert_eq!(back.to_vec::<f64>().unwrap(), t.to_vec::<f64>().unwrap());
}

#[test]
fn negative_strides_keep_element_zero_inside_the_span() {
    let t = TensorView::zeros(DType::I32, &[5])
        .unwrap()
        .flip(0)
        .unwrap();
    let (state, buffer) = bytes_of(&t);
    assert_eq!((state.offset, state.nbytes), (16, 20));
    assert!(state.view_over(buffer, false).unwrap().0.is_readonly());
}

fn state(shape: Vec<i64>, strides: Vec<i64>, offset: usize, nbytes: usize) -> TensorState {
    TensorState {
        dtype: DType::F32,
        shape,
        strides,
        offset,
        nbytes,
        readonly: false,
        is_copied: false,
    }
}

#[test]
fn layouts_reaching_outside_their_buffer_are_refused() {
    for (s, says) in [
        (state(vec![10], vec![1], 0, 36), "reach outside"),
        (state(vec![10], vec![1], 8, 40), "reach outside"),
        (state(vec![4], vec![-1], 0, 16), "reach outside"),
        (state(vec![-1], vec![1], 0, 16), "do not describe a tensor"),
        (
            state(vec![2, 2], vec![1], 0, 16),
            "do not describe a tensor",
        ),
        (
            state(vec![i64::MAX; 3], vec![i64::MAX; 3], 0, 16),
            "do not describe a tensor",
        ),
        (
            state(vec![2, 1 << 62], vec![1 << 62, 1], 0, 64),
            "reach outside",
        ),
    ] {
        let err = s.check().unwrap_err();
        assert!(matches!(err, Error::Wire(_)), "{err}");
        assert!(err.to_string().contains(says), "{err}");
        let buffer = Buffer::zeroed_host(s.nbytes, 64).unwrap();
        assert!(s.view_over(buffer, true).is_err());
    }
    // Empty tensors span nothing and fit anywhere.
    assert!(state(vec![0, 7], vec![7, 1], 0, 0).check().is_ok());
}

#[test]
fn a_buffer_of_another_length_is_refused() {
    let s = state(vec![4], vec![1], 0, 16);
    for len in [0, 12, 20] {
        let err = s
            .view_over(Buffer::zeroed_host(len, 64).unwrap(), true)
            .unwrap_err();
        assert!(err.to_string().contains("the buffer holds"), "{err}");
    }
}

#[test]
fn misaligned_data_is_copied_to_an_aligned_buffer_and_says_so() {
    let backing = Buffer::zeroed_host(17, 64).unwrap();
    // SAFETY: 16 bytes from byte 1 of a 17-byte live buffer, kept alive by its owner.
    let shifted = unsafe {
        Buffer::from_foreign(
            std::ptr::NonNull::new(backing.as_ptr().add(1)).unwrap(),
            16,
            crate::Device::CPU,
            std::sync::Arc::new(backing.clone()),
        )
    };
    // SAFETY: writes the 16 bytes `shifted` spans, in the private backing buffer.
    unsafe { std::ptr::write_bytes(shifted.as_ptr(), 7, 16) };
    let (view, copied) = state(vec![4], vec![1], 0, 16)
        .view_over(shifted, false)
        .unwrap();
    assert!(
        copied && view.is_readonly(),
        "read-only data stays read-only when copied"
    );
    assert_eq!((view.data_ptr() as usize) % 4, 0);
    assert!(view
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .all(|x| x.to_bits() == 0x0707_0707));
}

#[test]
fn dtype_names_round_trip_lanes_included() {
    for dtype in [DType::F32, DType::I8, DType::from_raw(2, 32, 4).unwrap()] {
        assert_eq!(parse_dtype(&dtype.to_string()).unwrap(), dtype);
    }
    assert!(parse_dtype("float32xx").is_err() && parse_dtype("").is_err());
}

#[test]
fn another_format_is_refused() {
    assert!(check_format(Some(FORMAT), "1").is_ok());
    let err = check_format(Some(2), "2").unwrap_err().to_string();
    assert!(
        err.contains("format is 2") && err.contains("another version"),
        "{err}"
    );
    assert!(check_format(None, "'one'").is_err());
}

pub(super) fn schema() -> Schema {
    Schema::builder()
        .column("x", DType::F64)
        .vector("v", DType::F32, 3)
        .matrix(
            "m",
            DType::F32,
            2,
            3,
            crate::soa::ComponentOrder::ColumnMajor,
        )
        .scalar("n", DType::I64)
        .build()
        .unwrap()
}

#[test]
fn a_table_travels_and_comes_back_over_the_bytes_it_was_sent_as() {
    let mut table = SoaTable::new(schema(), 10).unwrap();
    table.column_mut::<f64>("x").unwrap()[9] = 2.5;
    let table = table.slice_rows(2, 10).unwrap();
    let state = TableState::of(&table);
    assert_eq!(
        schema_from_wire(schema_to_wire(&state.schema)).unwrap(),
        state.schema
    );
    let buffer = Buffer::zeroed_host(state.nbytes, 128).unwrap();
    // SAFETY: the table's whole buffer into a fresh one of the same length.
    unsafe {
        std::ptr::copy_nonoverlapping(table.buffer().as_ptr(), buffer.as_ptr(), state.nbytes)
    };
    let (back, copied) = state.table_over(buffer, true, false).unwrap();
    assert!(!copied && (back.first_row(), back.len()) == (2, 8));
    assert_eq!(back.column::<f64>("x").unwrap()[7], 2.5);
}

#[test]
fn table_states_that_contradict_their_data_are_refused() {
    let table = SoaTable::new(schema(), 10).unwrap();
    let good = TableState::of(&table);
    let mut lying = good.clone();
    lying.nbytes -= 1;
    let err = lying.check().unwrap_err().to_string();
    assert!(err.contains("metadata says"), "{err}");
    let short = Buffer::zeroed_host(good.nbytes - 64, 128).unwrap();
    assert!(good.clone().table_over(short, true, false).is_err());
    let mut past = good.clone();
    (past.first_row, past.len) = (8, 5);
    let buffer = Buffer::zeroed_host(good.nbytes, 128).unwrap();
    assert!(past.table_over(buffer, true, false).is_err());
    let mut columns = schema_to_wire(&good.schema);
    columns[2].order = "diagonal".into();
    let err = schema_from_wire(columns).unwrap_err().to_string();
    assert!(
        err.contains("has kind \"matrix\" / order \"diagonal\""),
        "{err}"
    );
    let mut wrapping = schema_to_wire(&good.schema);
    (wrapping[2].a, wrapping[2].b) = (274_177, 67_280_421_310_721);
    assert!(
        schema_from_wire(wrapping).is_err(),
        "R x C wraps: refused by Schema::new"
    );
}
