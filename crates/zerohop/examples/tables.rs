//! A tour on the CPU: an SoA table, its tensor map, a DLPack round trip and a pool with
//! statistics. `cargo run -p zerohop --example tables`

use std::sync::Arc;

use zerohop::dlpack::{export_versioned, import_versioned, ExportOptions};
use zerohop::memory::{set_current_resource, PoolResource, StatsResource};
use zerohop::soa::{ComponentOrder, MapOptions, Schema, SoaTable, TensorMap};
use zerohop::{DType, Device, SystemResource};

fn main() -> zerohop::Result<()> {
    // Every zerohop allocation on the host now comes from a pool, with statistics.
    let stats = Arc::new(StatsResource::new(Arc::new(PoolResource::new(
        Arc::new(SystemResource::new()),
        Default::default(),
    ))));
    set_current_resource(Device::CPU, stats.clone());

    let schema = Schema::builder()
        .scalar("run", DType::I32)
        .column("pt", DType::F32)
        .column("eta", DType::F32)
        .column("phi", DType::F32)
        .vector("pos", DType::F32, 3)
        .matrix("cov", DType::F32, 3, 3, ComponentOrder::RowMajor)
        .build()?;
    let mut tracks = SoaTable::new(schema, 10_000)?;
    tracks.set_scalar("run", 7i32)?;
    for (i, pt) in tracks.column_mut::<f32>("pt")?.iter_mut().enumerate() {
        *pt = i as f32 * 0.5;
    }
    println!("{}", tracks.layout());

    let map = TensorMap::builder()
        .tensor("kinematics", &["pt", "eta", "phi"])
        .tensor("pos", &["pos"])
        .tensor("cov", &["cov"])
        .build()?;
    for t in map.apply(&tracks, MapOptions::default())? {
        println!(
            "{:<10} shape {:?} strides {:?} copied {}",
            t.name,
            t.view.shape(),
            t.view.strides(),
            t.copied()
        );
    }

    let kinematics = &map.apply(&tracks, MapOptions::default())?[0].view;
    let managed = export_versioned(kinematics, ExportOptions::default())?;
    // SAFETY: ownership of the fresh export passes to the importer.
    let back = unsafe { import_versioned(managed) }?;
    println!(
        "DLPack round trip: same memory {}",
        back.view.data_ptr() == kinematics.data_ptr()
    );
    let s = stats.statistics();
    println!(
        "pool: {} allocation(s) in all, {} bytes in use now",
        s.total_count, s.current_bytes
    );
    Ok(())
}
