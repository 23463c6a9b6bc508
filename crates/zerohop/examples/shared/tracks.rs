//! The track table both inference examples use: scalars pt, eta, phi; a 3-vector position; a
//! row-major 3×3 covariance; an output column for the score.

use zerohop::soa::{ComponentOrder, Schema, SoaTable, TensorMap};
use zerohop::{DType, Result};

/// The number of rows from the first argument (default 1000).
pub fn rows_from_args() -> usize {
    std::env::args()
        .nth(1)
        .map_or(1000, |n| n.parse().expect("ROWS must be a number"))
}

/// An empty (zero-filled) track table of `rows` rows.
pub fn track_table(rows: usize) -> Result<SoaTable> {
    let schema = Schema::builder()
        .column("pt", DType::F32)
        .column("eta", DType::F32)
        .column("phi", DType::F32)
        .vector("position", DType::F32, 3)
        .matrix("covariance", DType::F32, 3, 3, ComponentOrder::RowMajor)
        .column("score", DType::F32)
        .build()?;
    SoaTable::new(schema, rows)
}

/// The model's inputs: kin (n, 3), position (n, 3), covariance (n, 3, 3).
pub fn input_map() -> Result<TensorMap> {
    TensorMap::builder()
        .tensor("kin", &["pt", "eta", "phi"])
        .tensor("position", &["position"])
        .tensor("covariance", &["covariance"])
        .build()
}
