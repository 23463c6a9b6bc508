//! Tables over memory the caller allocated: the memory is used where it lies, and its owner
//! hears exactly once that it is free, whether the table was made or refused.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::*;
use crate::device::Device;
use crate::dtype::DType;
use crate::release::ReleaseCallback;
use crate::Owner;

fn track_schema() -> Schema {
    Schema::builder()
        .scalar("run", DType::I32)
        .column("pt", DType::F32)
        .vector("position", DType::F32, 3)
        .matrix("covariance", DType::F32, 3, 3, ComponentOrder::ColumnMajor)
        .build()
        .unwrap()
}

/// Memory the test owns (u64 words, so 8-byte aligned) and a count of its releases.
struct Program {
    words: Vec<u64>,
    releases: Arc<AtomicUsize>,
}

struct Release(Arc<AtomicUsize>);
impl Drop for Release {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Program {
    fn new(bytes: usize) -> Self {
        Program {
            words: vec![0; bytes.div_ceil(8)],
            releases: Arc::new(AtomicUsize::new(0)),
        }
    }
    fn owner(&self) -> Owner {
        Arc::new(Release(self.releases.clone()))
    }
    fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }
}

#[test]
fn a_wrapped_buffer_is_used_where_it_lies_and_released_after_its_last_view() {
    let rows = 10;
    let layout = Layout::new(&track_schema(), rows, 128).unwrap();
    let mut program = Program::new(layout.total_bytes);
    let base = program.words.as_mut_ptr().cast::<u8>();
    // The program fills its SoA by the layout's rules: component k of position at
    // offset + k * pitch elements.
    let position = layout.column(2);
    for k in 0..3 {
        for r in 0..rows {
            let at = position.offset + (k * position.pitch + r) * 4;
            // SAFETY: inside the program's buffer, 4-byte aligned (offsets are 128-aligned).
            unsafe { base.add(at).cast::<f32>().write((10 * r + k) as f32) };
        }
    }
    // SAFETY: the buffer outlives the table (the test drops the table first).
    let table = unsafe {
        SoaTable::wrap(
            track_schema(),
            rows,
            128,
            base,
            layout.total_bytes,
            Device::CPU,
            program.owner(),
        )
    }
    .unwrap();
    assert_eq!(table.buffer().as_ptr(), base, "no copy");
    let view = table.column_view("position").unwrap();
    assert_eq!(view.data_ptr() as usize, base as usize + position.offset);
    assert_eq!(table.component::<f32>("position", 2).unwrap()[7], 72.0);
    let batch = table.slice_rows(4, 8).unwrap();
    assert_eq!(
        batch.component::<f32>("position", 1).unwrap(),
        &[41.0, 51.0, 61.0, 71.0]
    );
    drop(table);
    drop(view);
    assert_eq!(program.releases(), 0, "a slice still uses the memory");
    drop(batch);
    assert_eq!(program.releases(), 1);
}

#[test]
fn a_refused_buffer_is_released_once_and_untouched() {
    let layout = Layout::new(&track_schema(), 10, 128).unwrap();
    let mut program = Program::new(layout.total_bytes + 8);
    let base = program.words.as_mut_ptr().cast::<u8>();
    let cases: [(*mut u8, usize, Device, &str); 4] = [
        (base, layout.total_bytes - 1, Device::CPU, "bytes"),
        // SAFETY: one byte into the program's buffer: still inside it.
        (
            unsafe { base.add(1) },
            layout.total_bytes,
            Device::CPU,
            "not aligned",
        ),
        (
            std::ptr::null_mut(),
            layout.total_bytes,
            Device::CPU,
            "NULL",
        ),
        (base, layout.total_bytes, Device::cuda(0), "CUDA"),
    ];
    for (i, (data, bytes, device, says)) in cases.into_iter().enumerate() {
        // SAFETY: every pointer is inside the program's buffer or NULL; nothing is read.
        let error = unsafe {
            SoaTable::wrap(
                track_schema(),
                10,
                128,
                data,
                bytes,
                device,
                program.owner(),
            )
        }
        .unwrap_err()
        .to_string();
        assert!(error.contains(says), "{says}: {error}");
        assert_eq!(program.releases(), i + 1, "{says}: released once, at once");
    }
    assert!(program.words.iter().all(|&w| w == 0), "nothing written");
}

unsafe extern "C" fn count_release(ctx: *mut c_void) {
    // SAFETY: the test passes a live AtomicUsize.
    unsafe { &*(ctx as *const AtomicUsize) }.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn a_c_release_callback_runs_when_the_last_tensor_dies_on_another_thread() {
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    let layout = Layout::new(&track_schema(), 4, 128).unwrap();
    let mut program = Program::new(layout.total_bytes);
    let base = program.words.as_mut_ptr().cast::<u8>();
    // SAFETY: `count_release` touches a static only; the buffer outlives every view.
    let owner: Owner = Arc::new(unsafe {
        ReleaseCallback::new(
            count_release,
            &RELEASED as *const AtomicUsize as *mut c_void,
        )
    });
    // SAFETY: as above.
    let table = unsafe {
        SoaTable::wrap(
            track_schema(),
            4,
            128,
            base,
            layout.total_bytes,
            Device::CPU,
            owner,
        )
    }
    .unwrap();
    let map = TensorMap::builder()
        .tensor("kinematics", &["position"])
        .build()
        .unwrap();
    let tensors = map.apply(&table, MapOptions::default()).unwrap();
    drop(table);
    assert_eq!(RELEASED.load(Ordering::SeqCst), 0);
    std::thread::spawn(move || drop(tensors)).join().unwrap();
    assert_eq!(RELEASED.load(Ordering::SeqCst), 1);
}

mod over_view {
    use super::*;
    use crate::tensor::TensorView;

    fn bytes_for(schema: &Schema, rows: usize) -> usize {
        Layout::new(schema, rows, 128).unwrap().total_bytes
    }

    #[test]
    fn uses_the_view_memory_and_keeps_its_owner() {
        let schema = track_schema();
        let bytes = bytes_for(&schema, 10);
        let view = TensorView::zeros(DType::U8, &[bytes as i64]).unwrap();
        let before = view.owner().clone();
        let counted = Arc::strong_count(&before);
        let table = SoaTable::over_view(schema, 10, 128, &view).unwrap();
        assert_eq!(table.buffer().as_ptr(), view.data_ptr());
        assert!(
            Arc::strong_count(&before) > counted,
            "the table holds the producer"
        );
        drop(view);
        let pt = table.column::<f32>("pt").unwrap();
        assert_eq!(pt.len(), 10);
        drop(table);
        assert_eq!(Arc::strong_count(&before), 1);
    }

    #[test]
    fn keeps_read_only() {
        let schema = track_schema();
        let bytes = bytes_for(&schema, 4);
        let view = TensorView::zeros(DType::U8, &[bytes as i64])
            .unwrap()
            .into_readonly();
        let table = SoaTable::over_view(schema, 4, 128, &view).unwrap();
        assert!(table.is_readonly());
    }

    #[test]
    fn refuses_a_short_or_strided_view() {
        let schema = track_schema();
        let bytes = bytes_for(&schema, 10);
        let short = TensorView::zeros(DType::U8, &[bytes as i64 - 1]).unwrap();
        let err = SoaTable::over_view(schema.clone(), 10, 128, &short).unwrap_err();
        assert!(err.to_string().contains("take"), "{err}");
        let wide = TensorView::zeros(DType::U8, &[2, bytes as i64]).unwrap();
        let strided = wide.transpose(0, 1).unwrap();
        let err = SoaTable::over_view(schema, 10, 128, &strided).unwrap_err();
        assert!(err.to_string().contains("compact"), "{err}");
    }

    #[test]
    fn an_empty_buffer_with_no_address_makes_a_table_of_no_rows() {
        let schema = Schema::builder().column("mv", DType::F32).build().unwrap();
        let empty = TensorView::zeros(DType::U8, &[0]).unwrap();
        let table = SoaTable::over_view(schema, 0, 128, &empty).unwrap();
        assert_eq!(table.len(), 0);
        assert_eq!(table.column::<f32>("mv").unwrap().len(), 0);
    }
}
