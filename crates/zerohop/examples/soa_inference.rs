//! The CMS flow in Rust: an SoA table of tracks, mapped to tensors (strided views of the one
//! buffer), a small fixed model run on them through ndarray, and its scores written into the
//! table's output column. Every hand-off is checked for pointer identity; nothing is copied.
//!
//!     cargo run -p zerohop --features ndarray --example soa_inference [ROWS]

use ndarray::{Array1, Array2, Axis, Ix2, Ix3};
use zerohop::soa::MapOptions;
use zerohop::Result;

#[path = "shared/tracks.rs"]
mod tracks;

fn main() -> Result<()> {
    let rows = tracks::rows_from_args();
    let mut table = tracks::track_table(rows)?;
    let buffer = table.buffer().as_ptr() as usize
        ..table.buffer().as_ptr() as usize + table.layout().total_bytes;

    // Inputs, written in place through mutable ndarray views of the columns.
    for (name, scale) in [("pt", 1.0f32), ("eta", 0.5), ("phi", 0.25)] {
        let mut column = table.column_ndarray_mut::<f32>(name)?;
        column
            .indexed_iter_mut()
            .for_each(|(i, v)| *v = scale * (i[0] % 7) as f32);
    }
    table.column_ndarray_mut::<f32>("position")?.fill(0.1);
    table.column_ndarray_mut::<f32>("covariance")?.fill(0.01);

    // The map: kin (n, 3), position (n, 3), covariance (n, 3, 3), strides from the layout.
    let map = tracks::input_map()?;
    let tensors = map.apply(
        &table,
        MapOptions {
            readonly: true,
            allow_copy: false,
        },
    )?;
    for t in &tensors {
        let at = t.view.data_ptr() as usize;
        assert!(
            buffer.contains(&at) && !t.copied(),
            "{} is not a view of the table",
            t.name
        );
        println!(
            "{:<10} shape {:?} strides {:?}: a view of the table",
            t.name,
            t.view.shape(),
            t.view.strides()
        );
    }
    let scores = {
        let kin = tensors[0]
            .view
            .as_ndarray::<f32>()?
            .into_dimensionality::<Ix2>()
            .unwrap();
        let position = tensors[1]
            .view
            .as_ndarray::<f32>()?
            .into_dimensionality::<Ix2>()
            .unwrap();
        let covariance = tensors[2]
            .view
            .as_ndarray::<f32>()?
            .into_dimensionality::<Ix3>()
            .unwrap();
        assert_eq!(
            kin.as_ptr() as usize,
            tensors[0].view.data_ptr() as usize,
            "ndarray copied kin"
        );

        // A fixed linear scorer over the 15 features: sigmoid(w · [kin, position, trace(cov)]).
        let w_kin = Array1::from(vec![0.3f32, -0.2, 0.1]);
        let w_pos = Array1::from(vec![0.5f32, 0.5, 0.5]);
        let trace: Array1<f32> = covariance
            .axis_iter(Axis(0))
            .map(|m| m.diag().sum())
            .collect();
        let logits = kin.dot(&w_kin) + position.dot(&w_pos) + &trace;
        logits.mapv(|z| 1.0 / (1.0 + (-z).exp()))
    }; // the views end here; the table is written next
    drop(tensors);

    // The scores land in the output column, in place.
    table
        .column_ndarray_mut::<f32>("score")?
        .assign(&scores.clone().into_dyn());
    let written = table.column::<f32>("score")?;
    assert_eq!(written, scores.as_slice().unwrap());
    let batch: Array2<f32> = scores.insert_axis(Axis(1));
    println!(
        "{rows} rows scored; first scores {:?}",
        &batch.as_slice().unwrap()[..3.min(rows)]
    );
    Ok(())
}
