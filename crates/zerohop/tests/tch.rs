//! tch tensors over zerohop memory: the same memory (pointer identity), the layout's strides,
//! element kinds, the owner kept alive, and refusals that name what is wrong. Built and run by
//! `make test-tch` (tch 0.26 needs libtorch 2.13).

use tch::Kind;
use zerohop::soa::{ComponentOrder, MapOptions, Schema, SoaTable, TensorMap};
use zerohop::tch_tensors::tch_kind;
use zerohop::{DType, TensorView};

fn tracks(rows: usize) -> SoaTable {
    let schema = Schema::builder()
        .column("pt", DType::F32)
        .column("eta", DType::F32)
        .vector("position", DType::F64, 3)
        .matrix("covariance", DType::F32, 3, 3, ComponentOrder::ColumnMajor)
        .column("hits", DType::I32)
        .build()
        .unwrap();
    let mut table = SoaTable::new(schema, rows).unwrap();
    for (i, v) in table
        .column_mut::<f32>("pt")
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        *v = i as f32;
    }
    for k in 0..3 {
        table
            .component_mut::<f64>("position", k)
            .unwrap()
            .fill(k as f64);
    }
    for k in 0..9 {
        table
            .component_mut::<f32>("covariance", k)
            .unwrap()
            .fill(k as f32);
    }
    table
}

#[test]
fn columns_are_the_tables_memory_with_its_strides() {
    let table = tracks(10);
    for name in ["pt", "position", "covariance", "hits"] {
        let view = table.column_view(name).unwrap();
        let t = table.column_tch(name).unwrap();
        assert_eq!(t.data_ptr() as usize, view.data_ptr() as usize, "{name}");
        assert_eq!(t.size(), view.shape(), "{name}");
        assert_eq!(t.stride(), view.strides(), "{name}");
        assert_eq!(t.kind(), tch_kind(view.dtype()).unwrap(), "{name}");
        assert_eq!(t.device(), tch::Device::Cpu);
    }
    let pt = table.column_tch("pt").unwrap();
    assert_eq!(pt.double_value(&[7]), 7.0);
    // Column-major 3×3: element (r, c) of a row is component c * 3 + r.
    let covariance = table.column_tch("covariance").unwrap();
    assert_eq!(covariance.double_value(&[4, 1, 2]), 7.0);
    let position = table.column_tch("position").unwrap();
    assert_eq!(position.kind(), Kind::Double);
    assert_eq!(position.double_value(&[9, 2]), 2.0);
}

#[test]
fn writes_through_libtorch_land_in_the_table() {
    let table = tracks(5);
    let pt = table.column_tch("pt").unwrap();
    let _ = pt.shallow_clone().fill_(2.5);
    drop(pt);
    assert_eq!(table.column::<f32>("pt").unwrap(), &[2.5; 5]);
}

#[test]
fn a_tensor_map_hands_libtorch_views_and_the_owner_outlives_the_table() {
    let table = tracks(8);
    let map = TensorMap::builder()
        .tensor("kin", &["pt", "eta"])
        .tensor("covariance", &["covariance"])
        .build()
        .unwrap();
    let mapped = map.apply(&table, MapOptions::default()).unwrap();
    let tensors: Vec<_> = mapped.iter().map(|t| t.view.to_tch().unwrap()).collect();
    for (t, m) in tensors.iter().zip(&mapped) {
        assert!(!m.copied());
        assert_eq!(t.data_ptr() as usize, m.view.data_ptr() as usize);
        assert_eq!(t.stride(), m.view.strides());
    }
    drop(mapped);
    drop(table);
    // The memory is still there: each tensor holds the table's buffer.
    assert_eq!(tensors[0].double_value(&[6, 0]), 6.0);
    assert_eq!(tensors[1].size(), vec![8, 3, 3]);
}

#[test]
fn refusals_name_the_problem() {
    let readonly = tracks(3).into_readonly();
    let err = readonly.column_tch("pt").err().unwrap().to_string();
    assert!(err.contains("read-only"), "{err}");
    let err = tch_kind(DType::U32).unwrap_err().to_string();
    assert!(err.contains("no tch::Kind"), "{err}");
    let err = tracks(3).column_tch("nope").err().unwrap().to_string();
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn negative_strides_are_refused_and_empty_tensors_work() {
    let view = TensorView::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    let err = view.flip(0).unwrap().to_tch().err().unwrap().to_string();
    assert!(err.contains("negative strides [-1]"), "{err}");
    let t = view.to_tch().unwrap();
    assert_eq!(Vec::<f32>::try_from(&*t).unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    let empty = tracks(0).column_tch("pt").unwrap();
    assert_eq!(empty.size(), vec![0]);
}
