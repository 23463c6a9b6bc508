//! `#[derive(Soa)]` end to end: schema, typed columns, rows, growth, AoS round trips, and the
//! generated table feeding a tensor map.

use zerohop::soa::Soa;
use zerohop::soa::{ColumnKind, ComponentOrder, MapOptions, SoaRecord, TensorMap};
use zerohop::DType;

#[derive(Soa, Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    energy: f32,
    pos: [f32; 3],
    cov: [[f64; 3]; 2],
    id: i64,
}

fn hit(i: usize) -> Hit {
    let f = i as f32;
    Hit {
        energy: f,
        pos: [f, f + 0.5, f + 0.25],
        cov: [[i as f64, 1.0, 2.0], [3.0, 4.0, i as f64 * 2.0]],
        id: i as i64,
    }
}

#[test]
fn the_schema_mirrors_the_struct() {
    let schema = Hit::schema();
    let kinds: Vec<(String, DType, ColumnKind)> = schema
        .columns()
        .iter()
        .map(|c| (c.name.clone(), c.dtype, c.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("energy".into(), DType::F32, ColumnKind::Column),
            ("pos".into(), DType::F32, ColumnKind::Vector(3)),
            (
                "cov".into(),
                DType::F64,
                ColumnKind::Matrix {
                    rows: 2,
                    cols: 3,
                    order: ComponentOrder::RowMajor
                }
            ),
            ("id".into(), DType::I64, ColumnKind::Column),
        ]
    );
}

#[test]
fn aos_round_trip_and_typed_columns() {
    let rows: Vec<Hit> = (0..37).map(hit).collect();
    let table = HitTable::from_aos(&rows).unwrap();
    assert_eq!(table.len(), 37);
    assert_eq!(table.to_aos(), rows);
    assert_eq!(table.energy()[5], 5.0);
    assert_eq!(table.pos(1)[4], 4.5);
    assert_eq!(table.cov(1, 2)[3], 6.0);
    assert_eq!(table.energy().as_ptr() as usize % 128, 0);
    let r = table.row(7).unwrap();
    assert_eq!(
        (r.index(), r.energy(), r.pos(), r.id()),
        (7, 7.0, [7.0, 7.5, 7.25], 7)
    );
    assert_eq!(r.cov(), rows[7].cov);
    assert!(table.row(37).is_none() && table.get(37).is_none());
}

#[test]
fn push_grows_and_keeps_rows() {
    let mut table = HitTable::new().unwrap();
    for i in 0..100 {
        table.push(hit(i)).unwrap();
    }
    assert_eq!(table.len(), 100);
    assert!(table.capacity() >= 100);
    assert_eq!(table.get(63), Some(hit(63)));
    table.extend((100..150).map(hit)).unwrap();
    assert_eq!(table.to_aos(), (0..150).map(hit).collect::<Vec<_>>());
    table.energy_mut()[0] = -1.0;
    table.pos_mut(2)[0] = -2.0;
    table.cov_mut(0, 1)[0] = -3.0;
    let first = table.get(0).unwrap();
    assert_eq!(
        (first.energy, first.pos[2], first.cov[0][1]),
        (-1.0, -2.0, -3.0)
    );
    assert!(table.set(150, &hit(0)).is_err());
}

#[test]
fn a_derived_table_feeds_a_tensor_map() {
    let table = HitTable::from_aos(&(0..10).map(hit).collect::<Vec<_>>()).unwrap();
    let map = TensorMap::builder()
        .tensor("pos", &["pos"])
        .tensor("cov", &["cov"])
        .build()
        .unwrap();
    let tensors = map.apply(&table.table(), MapOptions::default()).unwrap();
    assert_eq!(tensors[0].view.shape(), &[10, 3]);
    assert_eq!(
        tensors[0].view.data_ptr() as usize,
        table.pos(0).as_ptr() as usize
    );
    assert_eq!(tensors[1].view.shape(), &[10, 2, 3]);
    let cov: Vec<f64> = tensors[1].view.to_vec().unwrap();
    assert_eq!(&cov[6 * 4..6 * 5], &[4.0, 1.0, 2.0, 3.0, 4.0, 8.0]);
}
