//! What a Rust project does with zerohop as a dependency: an SoA table, its columns as ndarray
//! views and grouped tensors, the same memory as an Arrow record batch, each hand-off checked
//! by pointer.

use ndarray::Ix2;
use zerohop::arrow::arrow_array::Array;
use zerohop::soa::{MapOptions, Schema, SoaTable, TensorMap};
use zerohop::{DType, Result};

fn main() -> Result<()> {
    let schema = Schema::builder()
        .column("pt", DType::F32)
        .column("eta", DType::F32)
        .vector("position", DType::F32, 3)
        .build()?;
    let mut table = SoaTable::new(schema, 1000)?;
    let start = table.buffer().as_ptr() as usize;
    let end = start + table.layout().total_bytes;
    let inside = |at: usize| (start..end).contains(&at);

    // Columns written in place through ndarray.
    table
        .column_ndarray_mut::<f32>("pt")?
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = i as f32);
    table.column_ndarray_mut::<f32>("position")?.fill(0.5);

    // Grouped tensors: (1000, 2) and (1000, 3), strides over the one buffer.
    let map = TensorMap::builder()
        .tensor("kin", &["pt", "eta"])
        .tensor("position", &["position"])
        .build()?;
    let tensors = map.apply(&table, MapOptions::default())?;
    for t in &tensors {
        assert!(
            inside(t.view.data_ptr() as usize) && t.copy.is_none(),
            "{} is a copy",
            t.name
        );
    }
    let kin = tensors[0].view.as_ndarray::<f32>()?;
    let kin = kin.into_dimensionality::<Ix2>().expect("kin is 2-D");
    assert_eq!(kin.shape(), &[1000, 2]);
    assert_eq!(kin[[999, 0]], 999.0);

    // The same memory as an Arrow record batch (arrow-rs, re-exported by zerohop): scalar
    // columns are shared; a vector column is transposed, a copy allowed here and reported.
    let export = table.to_record_batch(true)?;
    assert_eq!(export.copied_columns, ["position"]);
    let batch = export.batch;
    let pt = batch.column_by_name("pt").expect("a pt column");
    let values = pt.to_data().buffers()[0].as_ptr() as usize;
    assert!(inside(values), "the Arrow column is a view of the table");

    println!(
        "zerohop as a dependency: {} rows, {} tensors and an Arrow batch of {} columns, \
         all views of one buffer",
        table.len(),
        tensors.len(),
        batch.num_columns()
    );
    Ok(())
}
