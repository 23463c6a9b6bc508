//! The C ABI's cost per call, as a C++ host pays it: one column exported (and deleted), and a
//! 64-column table mapped to 64 tensors and each exported (the CMS-style per-event hand-off).
//! `cargo bench -p zerohop-capi --bench capi`

use std::ffi::CString;
use std::hint::black_box;
use std::ptr::{null, null_mut};

use criterion::{criterion_group, criterion_main, Criterion};
use zerohop_capi::*;

/// A table of 1000 rows and 64 float32 columns c0..c63, and the spec mapping each to a tensor.
fn wide_table() -> (*mut zh_table, CString) {
    let mut schema = null_mut();
    // SAFETY: live handles; NUL-terminated names.
    unsafe {
        assert_eq!(zh_schema_new(&mut schema), zh_status::ZH_OK);
        for i in 0..64 {
            let name = CString::new(format!("c{i}")).unwrap();
            let dtype = CString::new("float32").unwrap();
            assert_eq!(
                zh_schema_add_column(schema, name.as_ptr(), dtype.as_ptr()),
                zh_status::ZH_OK
            );
        }
        let mut table = null_mut();
        assert_eq!(
            zh_table_new(schema, 1000, 0, null(), &mut table),
            zh_status::ZH_OK
        );
        zh_schema_free(schema);
        let spec = (0..64)
            .map(|i| format!("c{i}"))
            .collect::<Vec<_>>()
            .join("; ");
        (table, CString::new(spec).unwrap())
    }
}

fn bench_capi(c: &mut Criterion) {
    let (table, spec) = wide_table();
    let column = CString::new("c7").unwrap();
    c.bench_function("zh_table_column+delete", |b| {
        b.iter(|| {
            let mut m = null_mut();
            // SAFETY: a live table; the export is deleted once.
            unsafe {
                zh_table_column(black_box(table), column.as_ptr(), &mut m);
                ((*m).deleter.unwrap())(m);
            }
        })
    });
    c.bench_function("zh_table_map(64 columns)+64 exports+delete", |b| {
        b.iter(|| {
            let mut tensors = null_mut();
            // SAFETY: a live table; every export is deleted once, the handle freed once.
            unsafe {
                zh_table_map(black_box(table), spec.as_ptr(), 0, &mut tensors);
                for i in 0..64 {
                    let mut m = null_mut();
                    zh_tensors_export(tensors, i, &mut m);
                    ((*m).deleter.unwrap())(m);
                }
                zh_tensors_free(tensors);
            }
        })
    });
    let mut map = null_mut();
    // SAFETY: a NUL-terminated spec, a writable out-parameter.
    unsafe { zh_map_new(spec.as_ptr(), 0, &mut map) };
    c.bench_function("zh_map_apply(64 columns)+64 exports+delete", |b| {
        b.iter(|| {
            let mut tensors = null_mut();
            // SAFETY: live map and table; every export deleted once, the handle freed once.
            unsafe {
                zh_map_apply(black_box(map), table, &mut tensors);
                for i in 0..64 {
                    let mut m = null_mut();
                    zh_tensors_export(tensors, i, &mut m);
                    ((*m).deleter.unwrap())(m);
                }
                zh_tensors_free(tensors);
            }
        })
    });
    // SAFETY: freed once.
    unsafe { zh_map_free(map) };
    // The same map in the core crate's terms, split: building the map, applying it.
    let schema = (0..64).fold(zerohop::soa::Schema::builder(), |s, i| {
        s.column(&format!("c{i}"), zerohop::DType::F32)
    });
    let soa = zerohop::soa::SoaTable::new(schema.build().unwrap(), 1000).unwrap();
    let names: Vec<String> = (0..64).map(|i| format!("c{i}")).collect();
    let build = || {
        names
            .iter()
            .fold(zerohop::soa::TensorMap::builder(), |b, n| b.tensor(n, &[n]))
            .build()
            .unwrap()
    };
    c.bench_function("core: TensorMap::build(64 groups)", |b| {
        b.iter(|| black_box(build()))
    });
    let map = build();
    c.bench_function("core: TensorMap::apply(64 groups)", |b| {
        b.iter(|| black_box(map.apply(&soa, Default::default()).unwrap()))
    });
    // SAFETY: freed once, after the benches.
    unsafe { zh_table_free(table) };
}

criterion_group!(benches, bench_capi);
criterion_main!(benches);
