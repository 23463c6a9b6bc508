//! The CMS flow in Rust over memory the program owns: a track SoA laid out by CMS's rules and
//! allocated by the program itself (a `Vec` of 128-byte lines), wrapped by zerohop where it
//! lies, mapped in batches of rows to ndarray views, scored, and the scores written into an
//! output SoA the program also owns. zerohop allocates nothing, and the program learns when its
//! buffers are free.
//!
//!     cargo run -p zerohop --features ndarray --example cms_wrap [ROWS] [BATCH]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ndarray::{Ix2, Ix3};
use zerohop::memory::{set_current_resource, StatsResource, SystemResource};
use zerohop::soa::{ComponentOrder, MapOptions, Schema, SoaTable, TensorMap};
use zerohop::{DType, Device, Owner, Result};

const ALIGN: usize = 128;

/// 128 bytes, aligned to 128: a `Vec` of these is memory aligned as CMS's SoAs are.
#[derive(Clone, Copy)]
#[repr(C, align(128))]
struct Line([f32; 32]);

/// The program's buffer: lines it allocated, and a count of zerohop giving it back.
struct Program {
    lines: Vec<Line>,
    released: Arc<AtomicUsize>,
}

/// What zerohop holds instead of the memory: dropped when the last view goes.
struct GiveBack(Arc<AtomicUsize>);
impl Drop for GiveBack {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Program {
    fn new(bytes: usize) -> Self {
        Program {
            lines: vec![Line([0.0; 32]); bytes.div_ceil(ALIGN)],
            released: Arc::new(AtomicUsize::new(0)),
        }
    }
    fn floats(&mut self) -> &mut [f32] {
        // SAFETY: a Line is 32 f32s with no padding (repr(C), 128 bytes, align 128).
        unsafe {
            std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.lines.len() * 32)
        }
    }
    fn owner(&self) -> Owner {
        Arc::new(GiveBack(self.released.clone()))
    }
}

fn padded(bytes: usize) -> usize {
    bytes.next_multiple_of(ALIGN)
}

fn main() -> Result<()> {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().expect("a number"));
    let rows = args.next().unwrap_or(10_000);
    let batch = args.next().unwrap_or(1_000).max(1);

    // CMS's rules, computed here: bField, pt, eta, phi, position (3 components), covariance
    // (9 components, column-major), each column and component padded to 128 bytes.
    let pitch = padded(rows * 4);
    let (pt, eta, phi) = (ALIGN, ALIGN + pitch, ALIGN + 2 * pitch);
    let position = ALIGN + 3 * pitch;
    let covariance = position + 3 * pitch;
    let bytes = covariance + 9 * pitch;
    let mut input = Program::new(bytes);
    let mut output = Program::new(padded(rows * 4));
    {
        let f = input.floats();
        for r in 0..rows {
            f[pt / 4 + r] = 1.0 + 0.001 * r as f32;
            f[eta / 4 + r] = -1.0 + 2.0 * r as f32 / rows as f32;
            f[phi / 4 + r] = 0.5;
            for k in 0..3 {
                f[(position + k * pitch) / 4 + r] = r as f32 + 0.1 * k as f32;
            }
            for (i, j) in (0..3).flat_map(|i| (0..3).map(move |j| (i, j))) {
                let value = if i == j { 1.0 } else { 0.01 * (i + j) as f32 };
                f[(covariance + (j * 3 + i) * pitch) / 4 + r] = value;
            }
        }
    }

    let schema = Schema::builder()
        .scalar("bField", DType::F32)
        .column("pt", DType::F32)
        .column("eta", DType::F32)
        .column("phi", DType::F32)
        .vector("position", DType::F32, 3)
        .matrix("covariance", DType::F32, 3, 3, ComponentOrder::ColumnMajor)
        .build()?;
    let stats = Arc::new(StatsResource::new(Arc::new(SystemResource::new())));
    let previous = set_current_resource(Device::CPU, stats.clone());
    let (in_base, out_base) = (
        input.lines.as_mut_ptr().cast::<u8>(),
        output.lines.as_mut_ptr().cast::<u8>(),
    );
    // SAFETY: both buffers live until the end of main, after every view (checked below by
    // their release counts).
    let tracks = unsafe {
        SoaTable::wrap(
            schema,
            rows,
            ALIGN,
            in_base,
            bytes,
            Device::CPU,
            input.owner(),
        )
    }?;
    let out_schema = Schema::builder().column("score", DType::F32).build()?;
    // SAFETY: as above, for the output buffer.
    let mut scores = unsafe {
        SoaTable::wrap(
            out_schema,
            rows,
            ALIGN,
            out_base,
            padded(rows * 4),
            Device::CPU,
            output.owner(),
        )
    }?;
    for (name, offset) in [
        ("pt", pt),
        ("position", position),
        ("covariance", covariance),
    ] {
        let at = tracks.column_view(name)?.data_ptr() as usize - in_base as usize;
        assert_eq!(at, offset, "{name}: zerohop's layout is CMS's");
    }

    let map = TensorMap::builder()
        .tensor("kin", &["pt", "eta", "phi"])
        .tensor("position", &["position"])
        .tensor("covariance", &["covariance"])
        .build()?;
    let options = MapOptions {
        readonly: true,
        allow_copy: false,
    };
    let mut batches = 0;
    for start in (0..rows).step_by(batch) {
        let stop = (start + batch).min(rows);
        let rows_in = tracks.slice_rows(start, stop)?;
        let tensors = map.apply(&rows_in, options)?;
        let kin = tensors[0]
            .view
            .as_ndarray::<f32>()?
            .into_dimensionality::<Ix2>()
            .unwrap();
        let pos = tensors[1]
            .view
            .as_ndarray::<f32>()?
            .into_dimensionality::<Ix2>()
            .unwrap();
        let cov = tensors[2]
            .view
            .as_ndarray::<f32>()?
            .into_dimensionality::<Ix3>()
            .unwrap();
        assert_eq!(
            kin.as_ptr() as usize,
            in_base as usize + pt + 4 * start,
            "kin is a view"
        );
        assert_eq!(
            pos.as_ptr() as usize,
            in_base as usize + position + 4 * start
        );
        assert_eq!(
            cov.as_ptr() as usize,
            in_base as usize + covariance + 4 * start
        );
        assert_eq!(
            cov[[0, 2, 1]],
            0.03,
            "element (2, 1) read through the column-major strides"
        );
        // The model: a fixed score from the features, written into the output's rows.
        let mut out = scores.slice_rows(start, stop)?;
        let written = out.column_mut::<f32>("score")?;
        assert_eq!(written.as_ptr() as usize, out_base as usize + 4 * start);
        for (r, score) in written.iter_mut().enumerate() {
            let z = 0.3 * kin[[r, 0]] - 0.2 * kin[[r, 1]] + 0.01 * pos[[r, 0]] + cov[[r, 1, 1]];
            *score = 1.0 / (1.0 + (-z).exp());
        }
        batches += 1;
    }
    let first = scores.column_mut::<f32>("score")?[0];
    assert!((first - 1.0 / (1.0 + (-(0.3 + 0.2 + 1.0f32)).exp())).abs() < 1e-6);
    assert_eq!(
        stats.statistics().total_count,
        0,
        "zerohop allocated nothing"
    );
    match previous {
        Some(resource) => drop(set_current_resource(Device::CPU, resource)),
        None => zerohop::memory::reset_current_resource(Device::CPU),
    }

    drop(tracks);
    drop(scores);
    assert_eq!(
        input.released.load(Ordering::SeqCst),
        1,
        "the input came back once"
    );
    assert_eq!(
        output.released.load(Ordering::SeqCst),
        1,
        "the output came back once"
    );
    println!(
        "{rows} rows in {batches} batches of {batch}: every tensor a view of the program's own \
         buffer, scores written into its output buffer, 0 bytes allocated by zerohop"
    );
    Ok(())
}
