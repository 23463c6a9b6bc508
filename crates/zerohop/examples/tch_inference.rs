//! The CMS flow in Rust with libtorch: an SoA table of tracks mapped to `tch::Tensor`s (strided
//! views of the one buffer, made by `Tensor::from_blob`), a small fixed model run on them by
//! libtorch, and its scores written into the table's output column in place. Every hand-off
//! is checked for pointer identity; nothing is copied.
//!
//!     make test-tch      (or, with libtorch 2.13 found by tch:
//!     cargo run -p zerohop --features tch --example tch_inference [ROWS])

use tch::{Kind, Tensor};
use zerohop::soa::MapOptions;
use zerohop::Result;

#[path = "shared/tracks.rs"]
mod tracks;

fn main() -> Result<()> {
    let rows = tracks::rows_from_args();
    let mut table = tracks::track_table(rows)?;
    for (name, scale) in [("pt", 1.0f32), ("eta", 0.5), ("phi", 0.25)] {
        for (i, v) in table.column_mut::<f32>(name)?.iter_mut().enumerate() {
            *v = scale * (i % 7) as f32;
        }
    }
    for k in 0..3 {
        table.component_mut::<f32>("position", k)?.fill(0.1);
    }
    for k in 0..9 {
        table.component_mut::<f32>("covariance", k)?.fill(0.01);
    }

    // The map: kin (n, 3), position (n, 3), covariance (n, 3, 3), strides from the layout.
    let map = tracks::input_map()?;
    let mapped = map.apply(&table, MapOptions::default())?;
    let mut inputs = Vec::new();
    for t in &mapped {
        let tensor = t.view.to_tch()?;
        assert!(!t.copied(), "{} was copied", t.name);
        assert_eq!(
            tensor.data_ptr() as usize,
            t.view.data_ptr() as usize,
            "{}: libtorch does not see the table's memory",
            t.name
        );
        assert_eq!(tensor.stride(), t.view.strides(), "{}", t.name);
        println!(
            "{:<10} size {:?} stride {:?}: the table's memory",
            t.name,
            tensor.size(),
            tensor.stride()
        );
        inputs.push(tensor);
    }

    // A fixed linear scorer: sigmoid(w · kin + Σ position + trace(covariance)).
    let w = Tensor::from_slice(&[0.3f32, -0.2, 0.1]);
    let logits = inputs[0].matmul(&w)
        + inputs[1].sum_dim_intlist(1, false, Kind::Float)
        + inputs[2]
            .diagonal(0, 1, 2)
            .sum_dim_intlist(1, false, Kind::Float);
    let scores = logits.sigmoid();

    // The scores land in the output column, in place, through a tensor over that column.
    let score = table.column_tch("score")?;
    let column = table.column_view("score")?.data_ptr() as usize;
    assert_eq!(score.data_ptr() as usize, column, "score is not the column");
    let mut target = score.shallow_clone();
    target.copy_(&scores);
    drop(target);
    drop(score);
    drop(inputs);
    drop(mapped);
    let written = table.column::<f32>("score")?;
    let expected = Vec::<f32>::try_from(&scores).expect("scores as f32");
    assert_eq!(written, expected.as_slice());
    println!(
        "{rows} rows scored by libtorch; first scores {:?}",
        &written[..3.min(rows)]
    );
    Ok(())
}
