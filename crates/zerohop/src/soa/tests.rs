//! Layout exactness, aliasing of every mapped element, and every error of the spec.

use super::*;
use crate::dtype::DType;
use crate::tensor::TensorView;

fn sample_schema() -> Schema {
    Schema::builder()
        .scalar("run", DType::I32)
        .column("x", DType::F32)
        .column("y", DType::F32)
        .column("z", DType::F32)
        .vector("p", DType::F32, 3)
        .vector("q", DType::F32, 3)
        .matrix("cov", DType::F64, 2, 3, ComponentOrder::ColumnMajor)
        .matrix("rot", DType::F64, 2, 2, ComponentOrder::RowMajor)
        .column("id", DType::I64)
        .build()
        .unwrap()
}

#[test]
fn layout_pads_every_column_and_component() {
    let layout = Layout::new(&sample_schema(), 10, 128).unwrap();
    let expect = [
        // (offset, pitch, size, padding)
        (0, 32, 128, 124),
        (128, 32, 128, 88),
        (256, 32, 128, 88),
        (384, 32, 128, 88),
        (512, 32, 384, 264),
        (896, 32, 384, 264),
        (1280, 16, 768, 288),
        (2048, 16, 512, 192),
        (2560, 16, 128, 48),
    ];
    for (col, &(offset, pitch, size, padding)) in layout.columns.iter().zip(&expect) {
        assert_eq!(
            (col.offset, col.pitch, col.size, col.padding),
            (offset, pitch, size, padding),
            "{}",
            col.name
        );
    }
    assert_eq!(layout.total_bytes, 2688);
    let text = layout.to_string();
    assert!(
        text.contains("matrix[2x3, column-major]") && text.contains("2688 bytes"),
        "{text}"
    );
}

#[test]
fn schema_and_layout_refuse_bad_input() {
    assert!(Schema::builder()
        .column("a", DType::F32)
        .column("a", DType::F32)
        .build()
        .is_err());
    assert!(Schema::builder().column("", DType::F32).build().is_err());
    assert!(Schema::builder()
        .vector("v", DType::F32, 0)
        .build()
        .is_err());
    let fp4 = DType::from_raw(17, 4, 1).unwrap();
    assert!(Schema::builder().column("f", fp4).build().is_err());
    let schema = Schema::builder().column("c", DType::C128).build().unwrap();
    assert!(
        Layout::new(&schema, 4, 8).is_err(),
        "alignment below the element size"
    );
    assert!(
        Layout::new(&schema, 4, 96).is_err(),
        "alignment not a power of two"
    );
    assert!(
        Layout::new(&schema, usize::MAX / 2, 128).is_err(),
        "size overflow"
    );
    assert!(Layout::new(&schema, 4, 16).is_ok());
    // Rows × components that overflow only in the unpadded byte count: an error, not a panic.
    let wide = Schema::builder()
        .vector("v", DType::U8, usize::MAX / 3)
        .build()
        .unwrap();
    assert!(Layout::new(&wide, 4, 128).is_err(), "component overflow");
}

#[test]
fn shapes_beyond_a_tensor_dimension_are_refused_before_they_wrap() {
    let error = |b: SchemaBuilder| b.build().unwrap_err().to_string();
    // (2^32+1) × 2^32 wraps to 2^32 in 64 bits: it must be refused, not mapped.
    let wrapping = error(Schema::builder().matrix(
        "m",
        DType::F32,
        (1 << 32) + 1,
        1 << 32,
        ComponentOrder::ColumnMajor,
    ));
    assert!(
        wrapping.contains("\"m\"") && wrapping.contains("components per row"),
        "{wrapping}"
    );
    let big = error(Schema::builder().matrix(
        "m",
        DType::F32,
        274_177,
        67_280_421_310_721,
        ComponentOrder::RowMajor,
    ));
    assert!(big.contains("components per row"), "{big}");
    let long = error(Schema::builder().vector("v", DType::U8, 1 << 63));
    assert!(long.contains("components per row"), "{long}");
    assert!(Schema::builder()
        .vector("v", DType::U8, i64::MAX as usize)
        .build()
        .is_ok());
    let scalars = Schema::builder().scalar("s", DType::F32).build().unwrap();
    let rows = Layout::new(&scalars, 1 << 63, 128).unwrap_err().to_string();
    assert!(
        rows.contains("rows") && rows.contains("tensor dimension"),
        "{rows}"
    );
    assert!(Layout::new(&scalars, i64::MAX as usize, 128).is_ok());
}

#[test]
#[cfg_attr(miri, ignore)] // 200,000 columns: minutes under Miri
fn many_columns_are_checked_for_duplicates_by_hash() {
    let names: Vec<String> = (0..200_000).map(|i| format!("c{i}")).collect();
    let mut builder = Schema::builder();
    for name in &names {
        builder = builder.column(name, DType::U8);
    }
    let twice = builder.clone().column("c123456", DType::U8);
    assert_eq!(
        builder.build().unwrap().index_of("c199999").unwrap(),
        199_999
    );
    let error = twice.build().unwrap_err().to_string();
    assert!(
        error.contains("c123456") && error.contains("used twice"),
        "{error}"
    );
}

/// A map with a tensor of every kind of group over `sample_schema`.
fn every_group_kind() -> TensorMapBuilder {
    TensorMap::builder()
        .tensor("xyz", &["x", "y", "z"])
        .tensor("pq", &["p", "q"])
        .tensor("p_only", &["p"])
        .tensor("cov", &["cov"])
        .tensor("run", &["run"])
        .tensor("ids", &["id"])
}

fn filled_table(rows: usize) -> SoaTable {
    let mut t = SoaTable::new(sample_schema(), rows).unwrap();
    t.set_scalar("run", 7i32).unwrap();
    for (c, name) in ["x", "y", "z"].iter().enumerate() {
        for (i, v) in t.column_mut::<f32>(name).unwrap().iter_mut().enumerate() {
            *v = (c * 1000 + i) as f32;
        }
    }
    for (c, name) in ["p", "q"].iter().enumerate() {
        for k in 0..3 {
            for (i, v) in t
                .component_mut::<f32>(name, k)
                .unwrap()
                .iter_mut()
                .enumerate()
            {
                *v = (10_000 * (c + 1) + 100 * k + i) as f32;
            }
        }
    }
    for (c, name) in ["cov", "rot"].iter().enumerate() {
        let comps = if c == 0 { 6 } else { 4 };
        for k in 0..comps {
            for (i, v) in t
                .component_mut::<f64>(name, k)
                .unwrap()
                .iter_mut()
                .enumerate()
            {
                *v = (100_000 * (c + 1) + 100 * k + i) as f64;
            }
        }
    }
    for (i, v) in t.column_mut::<i64>("id").unwrap().iter_mut().enumerate() {
        *v = i as i64;
    }
    t
}

/// Address of element `index` of `view`.
fn address(view: &TensorView, index: &[i64]) -> usize {
    let item = view.dtype().itemsize() as i64;
    let offset: i64 = index.iter().zip(view.strides()).map(|(i, s)| i * s).sum();
    (view.data_ptr() as i64 + offset * item) as usize
}

fn every_index(shape: &[i64]) -> Vec<Vec<i64>> {
    let mut all = vec![vec![]];
    for &n in shape {
        all = all
            .into_iter()
            .flat_map(|prefix| {
                (0..n).map(move |i| {
                    let mut p = prefix.clone();
                    p.push(i);
                    p
                })
            })
            .collect();
    }
    all
}

#[test]
fn column_views_alias_the_columns() {
    let t = filled_table(5);
    let cov = t.column_view("cov").unwrap();
    assert_eq!(cov.shape(), &[5, 2, 3]);
    // Column-major: component k = c*R + r, so (i, r, c) reads component c*2 + r.
    for idx in every_index(cov.shape()) {
        let (i, r, c) = (idx[0] as usize, idx[1] as usize, idx[2] as usize);
        let expect = t.component::<f64>("cov", c * 2 + r).unwrap()[i];
        // SAFETY: the address lies inside the table (validated view).
        assert_eq!(unsafe { *(address(&cov, &idx) as *const f64) }, expect);
    }
    let rot = t.column_view("rot").unwrap().to_vec::<f64>().unwrap();
    let expect_rot: Vec<f64> = (0..5)
        .flat_map(|i| (0..4).map(move |k| (200_000 + 100 * k + i) as f64))
        .collect();
    assert_eq!(rot, expect_rot, "row-major components read in (r, c) order");
    assert_eq!(
        t.column_view("run").unwrap().to_vec::<i32>().unwrap(),
        vec![7]
    );
    assert_eq!(t.scalar::<i32>("run").unwrap(), 7);
}

#[test]
fn tensor_map_shapes_follow_the_cms_table_and_alias_every_element() {
    let t = filled_table(6);
    let map = every_group_kind()
        .order(&["ids", "xyz", "pq", "p_only", "cov", "run"])
        .build()
        .unwrap();
    let tensors = map.apply(&t, MapOptions::default()).unwrap();
    let names: Vec<&str> = tensors.iter().map(|m| &*m.name).collect();
    assert_eq!(names, ["ids", "xyz", "pq", "p_only", "cov", "run"]);
    let by = |n: &str| tensors.iter().find(|m| &*m.name == n).unwrap();
    assert_eq!(by("xyz").view.shape(), &[6, 3]);
    assert_eq!(by("xyz").view.strides(), &[1, 32]);
    assert_eq!(by("pq").view.shape(), &[6, 2, 3]);
    assert_eq!(by("pq").view.strides(), &[1, 96, 32]);
    assert_eq!(by("p_only").view.shape(), &[6, 3]);
    assert_eq!(by("cov").view.shape(), &[6, 2, 3]);
    assert_eq!(by("cov").view.strides(), &[1, 16, 32]);
    assert_eq!(by("run").view.shape(), &[6, 1]);
    assert_eq!(by("run").view.strides()[0], 0, "broadcast over rows");
    assert!(tensors.iter().all(|m| !m.copied()));

    // Naive gather: every element of every tensor aliases the right column element.
    for m in &tensors {
        for idx in every_index(m.view.shape()) {
            let row = idx[0] as usize;
            let (column, component) = match &*m.name {
                "xyz" => (m.columns[idx[1] as usize].clone(), 0),
                "pq" => (m.columns[idx[1] as usize].clone(), idx[2] as usize),
                "p_only" => ("p".into(), idx[1] as usize),
                "cov" => ("cov".into(), idx[2] as usize * 2 + idx[1] as usize),
                "run" => ("run".into(), 0),
                "ids" => ("id".into(), 0),
                other => unreachable!("{other}"),
            };
            let col = t.schema().index_of(&column).unwrap();
            let row = if column == "run" { 0 } else { row };
            let expected = t.component_ptr(col, component) as usize
                + row * t.layout().column(col).dtype.itemsize();
            assert_eq!(address(&m.view, &idx), expected, "{} {idx:?}", m.name);
        }
    }
}

#[test]
fn non_adjacent_groups_need_even_spacing_or_a_copy() {
    let t = filled_table(4);
    // x and z are 256 bytes apart, y in between: evenly spaced with a step of 2 pitches.
    let xz = TensorMap::builder()
        .tensor("xz", &["x", "z"])
        .build()
        .unwrap();
    let m = &xz.apply(&t, MapOptions::default()).unwrap()[0];
    assert_eq!(m.view.strides(), &[1, 64]);
    assert_eq!(
        m.view.to_vec::<f32>().unwrap(),
        vec![0., 2000., 1., 2001., 2., 2002., 3., 2003.]
    );

    // x, y, then z twice over: uneven.
    let uneven = TensorMap::builder()
        .tensor("xyy", &["x", "y", "y"])
        .build()
        .unwrap();
    let err = uneven
        .apply(&t, MapOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"xyy\"") && err.contains("not evenly spaced"),
        "{err}"
    );
    // Reversed order would need a negative stride: refused too (torch aborts on those).
    let reversed = TensorMap::builder()
        .tensor("zyx", &["z", "y", "x"])
        .build()
        .unwrap();
    assert!(reversed.apply(&t, MapOptions::default()).is_err());
    let copied = &reversed
        .apply(
            &t,
            MapOptions {
                allow_copy: true,
                ..Default::default()
            },
        )
        .unwrap()[0];
    assert!(copied.copied());
    assert_eq!(copied.view.shape(), &[4, 3]);
    assert_eq!(
        copied.view.to_vec::<f32>().unwrap()[..6],
        [2000., 1000., 0., 2001., 1001., 1.]
    );
}

#[test]
fn scalars_broadcast_or_materialise() {
    let t = filled_table(3);
    let map = TensorMap::builder()
        .tensor("run", &["run"])
        .materialize("run")
        .build()
        .unwrap();
    let m = &map.apply(&t, MapOptions::default()).unwrap()[0];
    assert!(m.copied());
    assert_eq!(m.view.strides(), &[1, 1]);
    assert_eq!(m.view.to_vec::<i32>().unwrap(), vec![7, 7, 7]);
}

#[test]
fn spec_errors_name_the_problem() {
    let t = filled_table(2);
    let apply = |b: TensorMapBuilder| -> String {
        match b.build() {
            Err(e) => e.to_string(),
            Ok(map) => map
                .apply(&t, MapOptions::default())
                .unwrap_err()
                .to_string(),
        }
    };
    assert!(apply(TensorMap::builder().tensor("a", &["x", "id"])).contains("mixes dtypes"));
    assert!(apply(TensorMap::builder().tensor("a", &["x", "p"])).contains("mixes kinds"));
    assert!(apply(TensorMap::builder().tensor("a", &["nope"])).contains("no column named \"nope\""));
    assert!(apply(TensorMap::builder().tensor("a", &[] as &[&str])).contains("names no columns"));
    assert!(apply(TensorMap::builder().tensor("a", &["x"]).tensor("a", &["y"])).contains("twice"));
    assert!(apply(TensorMap::builder().tensor("a", &["x"]).order(&["b"])).contains("exactly once"));
}

#[test]
fn read_only_maps_and_tables() {
    let t = filled_table(2).into_readonly();
    let m = &TensorMap::builder()
        .tensor("x", &["x"])
        .build()
        .unwrap()
        .apply(&t, MapOptions::default())
        .unwrap()[0];
    assert!(m.view.is_readonly());
    let mut t2 = filled_table(2);
    let ro = &TensorMap::builder()
        .tensor("x", &["x"])
        .build()
        .unwrap()
        .apply(
            &t2,
            MapOptions {
                readonly: true,
                ..Default::default()
            },
        )
        .unwrap()[0];
    assert!(ro.view.is_readonly());
    assert!(t2.column_mut::<f32>("x").is_ok());
    let mut t3 = t;
    assert!(t3.column_mut::<f32>("x").is_err());
}

#[test]
fn row_slices_share_memory_and_report_their_alignment() {
    let t = filled_table(100);
    let batch = t.slice_rows(32, 64).unwrap();
    assert_eq!(batch.len(), 32);
    assert_eq!(batch.column::<f32>("x").unwrap()[0], 32.0);
    assert_eq!(
        batch.alignment(),
        128,
        "32 rows of 4-byte and 8-byte values keep 128 B"
    );
    let odd = t.slice_rows(3, 10).unwrap();
    assert_eq!(odd.column::<i64>("id").unwrap(), &[3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(
        odd.alignment(),
        4,
        "row 3 of a float32 column starts 12 bytes in"
    );
    assert!(odd
        .describe()
        .contains("rows 3..10 (guaranteed alignment 4 B)"));
    let x = odd.column_view("x").unwrap();
    assert_eq!(
        x.data_ptr() as usize,
        t.column_view("x").unwrap().data_ptr() as usize + 12
    );
    assert_eq!(
        odd.scalar::<i32>("run").unwrap(),
        7,
        "scalars do not shift with rows"
    );
    assert!(t.slice_rows(50, 200).is_err());
    assert!(t.slice_rows(0, 0).unwrap().is_empty());
}

#[test]
fn typed_access_checks_dtype_and_component() {
    let t = filled_table(2);
    assert!(t.column::<f64>("x").is_err());
    assert!(t.component::<f32>("p", 3).is_err());
    assert!(t.scalar::<f32>("x").is_err());
}

#[cfg(not(miri))]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn kind() -> impl Strategy<Value = ColumnKind> {
        prop_oneof![
            Just(ColumnKind::TableScalar),
            Just(ColumnKind::Column),
            (1usize..5).prop_map(ColumnKind::Vector),
            (1usize..4, 1usize..4, any::<bool>()).prop_map(|(rows, cols, rm)| {
                ColumnKind::Matrix {
                    rows,
                    cols,
                    order: if rm {
                        ComponentOrder::RowMajor
                    } else {
                        ComponentOrder::ColumnMajor
                    },
                }
            }),
        ]
    }

    fn dtype() -> impl Strategy<Value = DType> {
        prop_oneof![
            Just(DType::U8),
            Just(DType::I16),
            Just(DType::F32),
            Just(DType::F64),
            Just(DType::C128)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The layout against an independent walk of the buffer.
        #[test]
        fn layout_matches_a_reference(
            cols in proptest::collection::vec((dtype(), kind()), 1..12),
            rows in 0usize..300,
            align_pow in 4u32..10,
        ) {
            let alignment = 1usize << align_pow;
            let specs: Vec<ColumnSpec> = cols.iter().enumerate().map(|(i, (d, k))| ColumnSpec {
                name: format!("c{i}"), dtype: *d, kind: *k,
            }).collect();
            let schema = Schema::new(specs).unwrap();
            let layout = Layout::new(&schema, rows, alignment).unwrap();
            let mut cursor = 0usize;
            for ((dtype, kind), col) in cols.iter().zip(&layout.columns) {
                let item = dtype.itemsize();
                let round = |b: usize| b.div_ceil(alignment) * alignment;
                prop_assert_eq!(col.offset, cursor);
                prop_assert_eq!(col.offset % alignment, 0);
                let size = match kind {
                    ColumnKind::TableScalar => round(item),
                    k => round(rows * item) * k.components(),
                };
                prop_assert_eq!(col.size, size);
                if *kind != ColumnKind::TableScalar {
                    prop_assert_eq!(col.pitch * item, round(rows * item));
                }
                cursor += size;
            }
            prop_assert_eq!(layout.total_bytes, cursor);
        }

        /// Grouping adjacent same-kind columns always yields views whose every element is the
        /// right column element.
        #[test]
        fn adjacent_groups_alias_their_columns(
            kind in kind(), k in 1usize..4, rows in 1usize..20, before in 0usize..3,
        ) {
            let mut b = Schema::builder();
            for i in 0..before { b = b.column(&format!("pad{i}"), DType::U8); }
            for j in 0..k { b = b.add(&format!("g{j}"), DType::F32, kind); }
            let t = SoaTable::new(b.build().unwrap(), rows).unwrap();
            let names: Vec<String> = (0..k).map(|j| format!("g{j}")).collect();
            let m = TensorMap::builder().tensor("g", &names).build().unwrap()
                .apply(&t, MapOptions::default()).unwrap().remove(0);
            prop_assert!(!m.copied());
            let comps = kind.components();
            for idx in every_index(m.view.shape()) {
                let keep_k = k > 1 || matches!(kind, ColumnKind::Column | ColumnKind::TableScalar);
                let j = if keep_k { idx[1] as usize } else { 0 };
                let rest = &idx[if keep_k { 2 } else { 1 }..];
                let component = match (kind, rest) {
                    (ColumnKind::Vector(_), [r]) => *r as usize,
                    (ColumnKind::Matrix { .. }, [r, c]) => kind.component_of(*r as usize, *c as usize),
                    _ => 0,
                };
                prop_assert!(component < comps);
                let col = t.schema().index_of(&names[j]).unwrap();
                let row = if kind == ColumnKind::TableScalar { 0 } else { idx[0] as usize };
                let expected = t.component_ptr(col, component) as usize + row * 4;
                prop_assert_eq!(address(&m.view, &idx), expected);
            }
        }
    }
}

#[test]
fn copy_to_another_resource_keeps_layout_values_and_row_window() {
    let schema = Schema::builder()
        .column("x", DType::F32)
        .vector("v", DType::I64, 2)
        .build()
        .unwrap();
    let mut t = SoaTable::new(schema, 6).unwrap();
    t.column_mut::<f32>("x")
        .unwrap()
        .copy_from_slice(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    t.component_mut::<i64>("v", 1)
        .unwrap()
        .copy_from_slice(&[10, 11, 12, 13, 14, 15]);
    let window = t.slice_rows(2, 5).unwrap();
    let resource: std::sync::Arc<dyn crate::memory::MemoryResource> =
        std::sync::Arc::new(crate::memory::SystemResource::new());
    let copy = window
        .copy_to(resource, crate::memory::Stream::HOST)
        .unwrap();
    assert_ne!(copy.buffer().as_ptr(), t.buffer().as_ptr());
    assert_eq!(copy.len(), 3);
    assert_eq!(copy.column::<f32>("x").unwrap(), &[2.0, 3.0, 4.0]);
    assert_eq!(copy.component::<i64>("v", 1).unwrap(), &[12, 13, 14]);
    assert_eq!(copy.layout(), t.layout());
    t.column_mut::<f32>("x").unwrap()[2] = -1.0;
    assert_eq!(
        copy.column::<f32>("x").unwrap()[0],
        2.0,
        "a copy, not a view"
    );
}

#[test]
fn an_empty_table_maps_every_spec_form_like_an_empty_slice() {
    let map = every_group_kind().build().unwrap();
    let empty = SoaTable::new(sample_schema(), 0).unwrap();
    let slice = filled_table(6).slice_rows(2, 2).unwrap();
    for table in [&empty, &slice] {
        let tensors = map.apply(table, MapOptions::default()).unwrap();
        let shapes: Vec<&[i64]> = tensors.iter().map(|m| m.view.shape()).collect();
        assert_eq!(
            shapes,
            [
                &[0, 3][..],
                &[0, 2, 3],
                &[0, 3],
                &[0, 2, 3],
                &[0, 1],
                &[0, 1]
            ]
        );
        assert!(tensors.iter().all(|m| !m.copied() && m.view.numel() == 0));
    }
    // Materialised scalars of an empty table are an empty copy, not an error.
    let m = TensorMap::builder()
        .tensor("run", &["run"])
        .materialize("run")
        .build()
        .unwrap()
        .apply(&empty, MapOptions::default())
        .unwrap();
    assert_eq!(m[0].view.shape(), &[0, 1]);
}

/// Host memory that remembers how each block was asked for.
#[derive(Debug, Default)]
struct RecordingResource {
    asked: std::sync::Mutex<Vec<(usize, usize, crate::memory::Stream)>>,
    system: crate::memory::SystemResource,
}

impl crate::memory::MemoryResource for RecordingResource {
    fn allocate(
        &self,
        bytes: usize,
        align: usize,
        stream: crate::memory::Stream,
    ) -> crate::error::Result<std::ptr::NonNull<u8>> {
        self.asked.lock().unwrap().push((bytes, align, stream));
        self.system.allocate(bytes, align, stream)
    }
    unsafe fn deallocate(
        &self,
        ptr: std::ptr::NonNull<u8>,
        bytes: usize,
        align: usize,
        stream: crate::memory::Stream,
    ) {
        // SAFETY: forwarded unchanged; the block came from `allocate` above.
        unsafe { self.system.deallocate(ptr, bytes, align, stream) }
    }
    fn device(&self) -> crate::device::Device {
        crate::device::Device::CPU
    }
}

#[test]
fn uninit_tables_come_from_the_given_resource_in_the_stream_order_asked() {
    let resource = std::sync::Arc::new(RecordingResource::default());
    let rows = 5;
    // SAFETY: only column "x" is ever read, after all of it is written.
    let mut t = unsafe {
        SoaTable::new_uninit_in(
            sample_schema(),
            rows,
            64,
            resource.clone(),
            crate::memory::Stream::cuda(7).unwrap(),
        )
    }
    .unwrap();
    let layout = Layout::new(&sample_schema(), rows, 64).unwrap();
    assert_eq!(
        *resource.asked.lock().unwrap(),
        vec![(
            layout.total_bytes,
            crate::memory::DEFAULT_ALIGNMENT,
            crate::memory::Stream::cuda(7).unwrap()
        )]
    );
    assert_eq!(t.layout(), &layout);
    assert_eq!(t.len(), rows);
    for column in sample_schema().columns() {
        let view = t.column_view(&column.name).unwrap();
        assert_eq!((view.data_ptr() as usize) % 64, 0, "{}", column.name);
    }
    let x = t.column_mut::<f32>("x").unwrap();
    x.copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(t.column::<f32>("x").unwrap(), &[1.0, 2.0, 3.0, 4.0, 5.0]);
    // A bad alignment is an error before anything is allocated.
    // SAFETY: no table is made, so nothing can be read.
    let refused = unsafe {
        SoaTable::new_uninit_in(
            sample_schema(),
            rows,
            3,
            resource.clone(),
            crate::memory::Stream::cuda(7).unwrap(),
        )
    };
    assert!(refused.is_err());
    assert_eq!(resource.asked.lock().unwrap().len(), 1);
}
