use super::{ColumnKind, ColumnSpec, ComponentOrder, Layout, Schema, SoaTable};
use crate::dtype::DType;

fn spec(name: &str, kind: ColumnKind) -> ColumnSpec {
    ColumnSpec {
        name: name.into(),
        dtype: DType::F32,
        kind,
    }
}

#[test]
fn a_pushed_column_is_refused_alone_and_leaves_the_schema_as_it_was() {
    let mut schema = Schema::default();
    schema.push(spec("pt", ColumnKind::Column)).unwrap();
    schema
        .push(spec("position", ColumnKind::Vector(3)))
        .unwrap();
    let before = schema.clone();
    let refusals = [
        (
            spec("pt", ColumnKind::Vector(2)),
            "\"pt\": the name is used twice",
        ),
        (spec("", ColumnKind::Column), "column 2 has an empty name"),
        (spec("v", ColumnKind::Vector(0)), "no components"),
        (
            spec(
                "m",
                ColumnKind::Matrix {
                    rows: (1 << 32) + 1,
                    cols: 1 << 32,
                    order: ComponentOrder::RowMajor,
                },
            ),
            "components per row than a tensor dimension holds (9223372036854775807)",
        ),
    ];
    for (column, says) in refusals {
        let error = schema.push(column).unwrap_err().to_string();
        assert!(error.contains(says), "{error}");
        assert_eq!(schema, before, "{says}: unchanged");
    }
    schema.push(spec("eta", ColumnKind::Column)).unwrap();
    assert_eq!(schema.index_of("eta").unwrap(), 2);
    assert_eq!(Schema::new(schema.columns().to_vec()).unwrap(), schema);
}

#[test]
fn a_layout_gives_the_shapes_and_strides_a_table_of_it_exports() {
    let schema = Schema::builder()
        .scalar("b", DType::F64)
        .column("x", DType::I16)
        .vector("v", DType::F32, 3)
        .matrix("r", DType::F32, 2, 3, ComponentOrder::RowMajor)
        .matrix("c", DType::F32, 2, 3, ComponentOrder::ColumnMajor)
        .build()
        .unwrap();
    let layout = Layout::new(&schema, 50, 64).unwrap();
    let table = SoaTable::with_options(
        schema.clone(),
        50,
        64,
        crate::memory::current_resource(crate::Device::CPU).unwrap(),
    )
    .unwrap();
    for (column, spec) in layout.columns.iter().zip(schema.columns()) {
        let view = table.column_view(&spec.name).unwrap();
        let dims = column.dims(50);
        assert_eq!(
            (dims.shape(), dims.strides()),
            (view.shape(), view.strides())
        );
        assert_eq!(
            view.data_ptr() as usize - table.buffer().as_ptr() as usize,
            column.offset
        );
    }
    assert_eq!(layout.column(3).dims(50).strides(), &[1, 3 * 64, 64]);
    assert_eq!(layout.column(4).dims(50).strides(), &[1, 64, 2 * 64]);
}
