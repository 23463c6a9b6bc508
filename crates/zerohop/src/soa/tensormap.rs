//! `TensorMap`: which columns become which tensor, grouped and ordered, with shapes and
//! strides computed so every tensor is a view of the table's buffer.
//!
//! Shapes follow the CMS PyTorch interface. For a group of k columns with pitch S and a
//! column step D (elements between the groups' consecutive columns):
//! * plain columns → (n, k), strides (1, D)
//! * vectors[R] → (n, k, R), strides (1, D, S); one vector → (n, R)
//! * matrices[R, C] → (n, k, R, C) in the schema's component order; one matrix → (n, R, C)
//! * table scalars → (n, k), stride 0 on the row axis (or materialised, on request)
//!
//! A group whose columns are not evenly spaced (D constant and positive) cannot be described
//! by strides: that is an error naming the columns, or a reported copy with `allow_copy`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::schema::ColumnKind;
use super::table::{matrix_strides, SoaTable};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::handoff::CopyReason;
use crate::tensor::{for_each_offset, TensorView};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Group {
    // Shared, so each application of the map hands them out without copying strings.
    pub(super) name: Arc<str>,
    pub(super) columns: Arc<[String]>,
    pub(super) materialize_scalars: bool,
}

/// A validated spec: named groups of columns, in output order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TensorMap {
    groups: Vec<Group>,
}

/// Builds a [`TensorMap`]; `build` checks names and order.
#[derive(Clone, Debug, Default)]
pub struct TensorMapBuilder {
    groups: Vec<Group>,
    order: Option<Vec<String>>,
}

impl TensorMapBuilder {
    /// One output tensor named `name` made of `columns` (all of one dtype and kind).
    pub fn tensor<S: AsRef<str>>(mut self, name: &str, columns: &[S]) -> Self {
        self.groups.push(Group {
            name: name.into(),
            columns: columns.iter().map(|c| c.as_ref().to_owned()).collect(),
            materialize_scalars: false,
        });
        self
    }

    /// The groups of a spec string, in its order: groups separated by ';', each a tensor
    /// name, a colon and its columns separated by ',' ("pos: x, y; energy"), or a bare column
    /// (a tensor of its own name). Whitespace around names is ignored; empty groups are
    /// skipped. The one string grammar: the C ABI's `zh_table_map` and Python's
    /// `Table.tensors("…")` both parse with this.
    pub fn spec(mut self, spec: &str) -> Result<Self> {
        let before = self.groups.len();
        for (i, group) in spec.split(';').enumerate() {
            let group = group.trim();
            if group.is_empty() {
                continue;
            }
            let (name, columns) = match group.split_once(':') {
                Some((name, columns)) => (name.trim(), columns),
                None => (group, group),
            };
            let columns: Vec<&str> = columns.split(',').map(str::trim).collect();
            if name.is_empty() || columns.iter().any(|c| c.is_empty()) {
                return Err(Error::Spec {
                    what: "spec".into(),
                    reason: format!(
                        "group {} ({group:?}): expected \"name: column, column\" or \"column\"",
                        i + 1
                    ),
                });
            }
            self = self.tensor(name, &columns);
        }
        if self.groups.len() == before {
            return Err(Error::Spec {
                what: "spec".into(),
                reason: format!("{spec:?} names no tensors"),
            });
        }
        Ok(self)
    }

    /// Table-scalar groups of `name` become real (n, k) tensors (a reported copy) instead of
    /// stride-0 broadcasts, for consumers such as JAX that reject stride 0.
    pub fn materialize(mut self, name: &str) -> Self {
        for g in self.groups.iter_mut().filter(|g| &*g.name == name) {
            g.materialize_scalars = true;
        }
        self
    }

    /// The output order; every tensor must be named exactly once (default: insertion order).
    pub fn order<S: AsRef<str>>(mut self, names: &[S]) -> Self {
        self.order = Some(names.iter().map(|n| n.as_ref().to_owned()).collect());
        self
    }

    pub fn build(self) -> Result<TensorMap> {
        let bad = |reason: String| Error::Spec {
            what: "tensor map".into(),
            reason,
        };
        // A spec may come from anywhere and name many tensors: checks stay linear in it.
        let mut seen = HashSet::with_capacity(self.groups.len());
        for (i, g) in self.groups.iter().enumerate() {
            if g.name.is_empty() {
                return Err(bad(format!("tensor {i} has an empty name")));
            }
            if g.columns.is_empty() {
                return Err(bad(format!("tensor {:?} names no columns", g.name)));
            }
            if !seen.insert(&*g.name) {
                return Err(bad(format!("tensor {:?} is defined twice", g.name)));
            }
        }
        let mut groups = self.groups;
        if let Some(order) = self.order {
            let mut names: Vec<&str> = order.iter().map(String::as_str).collect();
            names.sort_unstable();
            let mut defined: Vec<&str> = groups.iter().map(|g| &*g.name).collect();
            defined.sort_unstable();
            if names != defined {
                return Err(bad(format!(
                    "order {order:?} must name every tensor exactly once ({defined:?})"
                )));
            }
            let rank: HashMap<&str, usize> = order
                .iter()
                .enumerate()
                .map(|(i, n)| (n.as_str(), i))
                .collect();
            groups.sort_by_cached_key(|g| rank.get(&*g.name).copied());
        }
        Ok(TensorMap { groups })
    }
}

/// How a map is applied.
#[derive(Clone, Copy, Debug, Default)]
pub struct MapOptions {
    /// Export read-only views (DLPack READ_ONLY).
    pub readonly: bool,
    /// Allow a copy for groups strides cannot describe (the copy is reported).
    pub allow_copy: bool,
}

/// One output tensor.
#[derive(Clone, Debug)]
pub struct MappedTensor {
    pub name: Arc<str>,
    pub columns: Arc<[String]>,
    pub view: TensorView,
    /// Why the data was copied (a group no strides describe, with `allow_copy`; table
    /// scalars materialised; Arrow nulls filled or booleans unpacked); `None` for a view of
    /// the table.
    pub copy: Option<CopyReason>,
}

impl MappedTensor {
    /// Whether this tensor is a copy rather than a view of the table.
    pub fn copied(&self) -> bool {
        self.copy.is_some()
    }
}

impl TensorMap {
    pub fn builder() -> TensorMapBuilder {
        TensorMapBuilder::default()
    }

    /// A map from a spec string (see [`TensorMapBuilder::spec`]), in the spec's order.
    pub fn parse(spec: &str) -> Result<TensorMap> {
        TensorMap::builder().spec(spec)?.build()
    }

    #[cfg_attr(not(feature = "arrow"), allow(dead_code))]
    pub(super) fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// The columns of tensor `name`.
    pub fn columns_of(&self, name: &str) -> Option<Vec<String>> {
        self.groups
            .iter()
            .find(|g| &*g.name == name)
            .map(|g| g.columns.to_vec())
    }

    pub fn names(&self) -> Vec<&str> {
        self.groups.iter().map(|g| &*g.name).collect()
    }

    /// The tensors of `table`, in this map's order.
    pub fn apply(&self, table: &SoaTable, options: MapOptions) -> Result<Vec<MappedTensor>> {
        // Sized up front: collecting through `Result` would regrow (and move) the vector.
        let mut tensors = Vec::with_capacity(self.groups.len());
        for group in &self.groups {
            tensors.push(map_group(table, group, options)?);
        }
        Ok(tensors)
    }
}

fn map_group(table: &SoaTable, group: &Group, options: MapOptions) -> Result<MappedTensor> {
    let bad = |reason: String| Error::Spec {
        what: format!("tensor {:?} (columns {:?})", group.name, group.columns),
        reason,
    };
    // Small groups (nearly all) resolve their columns on the stack: no allocation per event.
    let mut inline = [0usize; 8];
    let resolved: Vec<usize>;
    let indices: &[usize] = if group.columns.len() <= inline.len() {
        for (slot, c) in inline.iter_mut().zip(group.columns.iter()) {
            *slot = table.schema().index_of(c)?;
        }
        &inline[..group.columns.len()]
    } else {
        resolved = group
            .columns
            .iter()
            .map(|c| table.schema().index_of(c))
            .collect::<Result<Vec<_>>>()?;
        &resolved
    };
    let first = table.layout().column(indices[0]);
    for &i in &indices[1..] {
        let col = table.layout().column(i);
        if col.dtype != first.dtype {
            return Err(bad(format!(
                "mixes dtypes: {:?} is {}, {:?} is {}",
                first.name, first.dtype, col.name, col.dtype
            )));
        }
        if col.kind != first.kind {
            return Err(bad(format!(
                "mixes kinds: {:?} is a {}, {:?} is a {}",
                first.name, first.kind, col.name, col.kind
            )));
        }
    }
    let k = indices.len() as i64;
    let n = table.len() as i64;
    let s = first.pitch as i64;
    let item = first.dtype.itemsize() as i64;
    let single = indices.len() == 1;
    // Element distance between consecutive columns of the group, when constant and positive.
    let step = if single {
        Some(s)
    } else {
        let offset = |i: usize| table.layout().column(indices[i]).offset as i64 / item;
        let d = offset(1) - offset(0);
        if n == 0 && first.kind != ColumnKind::TableScalar {
            // No rows, no bytes: every column sits at the same offset, and any stride
            // describes an empty tensor. Use the one a non-empty table would have had.
            Some(s.max(1))
        } else {
            (d > 0 && (1..indices.len()).all(|i| offset(i) - offset(i - 1) == d)).then_some(d)
        }
    };
    // Per-row shape and strides of one column of the group.
    let (inner_shape, inner_strides, inner, row_stride) = match first.kind {
        ColumnKind::TableScalar => ([0; 2], [0; 2], 0, 0),
        ColumnKind::Column => ([0; 2], [0; 2], 0, 1),
        ColumnKind::Vector(r) => ([r as i64, 0], [s, 0], 1, 1),
        ColumnKind::Matrix { rows, cols, .. } => {
            let (rs, cs) = matrix_strides(first.kind, s);
            ([rows as i64, cols as i64], [rs, cs], 2, 1)
        }
    };
    // Plain columns and scalars keep the k axis even for one column, as CMS does.
    let keep_k = !single || matches!(first.kind, ColumnKind::Column | ColumnKind::TableScalar);
    // (n, [k,] inner…) on the stack: at most four dimensions, nothing allocated per event.
    let (mut shape, mut strides, mut ndim) = ([0i64; 4], [0i64; 4], 1);
    shape[0] = n;
    strides[0] = row_stride;
    if keep_k {
        shape[1] = k;
        strides[1] = step.unwrap_or(s);
        ndim = 2;
    }
    shape[ndim..ndim + inner].copy_from_slice(&inner_shape[..inner]);
    strides[ndim..ndim + inner].copy_from_slice(&inner_strides[..inner]);
    ndim += inner;
    let (shape, strides) = (&shape[..ndim], &strides[..ndim]);

    let materialize = first.kind == ColumnKind::TableScalar && group.materialize_scalars;
    if let (Some(_), false) = (step, materialize) {
        let mut view = table.view_of(
            table.component_ptr(indices[0], 0),
            first.dtype,
            shape,
            strides,
        )?;
        if options.readonly {
            view = view.into_readonly();
        }
        return Ok(MappedTensor {
            name: group.name.clone(),
            columns: group.columns.clone(),
            view,
            copy: None,
        });
    }
    if !materialize && !options.allow_copy {
        let offsets: Vec<usize> = indices
            .iter()
            .map(|&i| table.layout().column(i).offset)
            .collect();
        return Err(bad(format!(
            "the columns sit at byte offsets {offsets:?}, not evenly spaced in declaration \
             order, so no strides describe them; declare them next to each other (or at equal \
             distances) in the schema, or allow a copy (copy=True)"
        )));
    }
    let view = gather(table, indices, first.dtype, shape)?;
    Ok(MappedTensor {
        name: group.name.clone(),
        columns: group.columns.clone(),
        view: if options.readonly {
            view.into_readonly()
        } else {
            view
        },
        copy: Some(if materialize {
            CopyReason::TableScalars
        } else {
            CopyReason::Gathered {
                columns: group.columns.to_vec(),
            }
        }),
    })
}

/// Copies a group into a fresh compact tensor of `shape` = (n, [k,] inner…).
fn gather(table: &SoaTable, indices: &[usize], dtype: DType, shape: &[i64]) -> Result<TensorView> {
    if !table.device().is_host_accessible() {
        return Err(Error::NotHostAccessible {
            device: table.device(),
        });
    }
    let item = dtype.itemsize();
    let out = TensorView::zeros(dtype, shape)?;
    let numel = out.numel();
    let k = indices.len();
    let per_row = numel / (table.len().max(1)) / k.max(1);
    let dst = out.data_ptr();
    for (j, &index) in indices.iter().enumerate() {
        let col = table.layout().column(index);
        let name = &col.name;
        let src_view = table.column_view(name)?;
        // The source as (n, inner…): a table scalar repeats for every row (stride 0).
        let (src_shape, src_strides) = if col.kind == ColumnKind::TableScalar {
            (vec![table.len() as i64], vec![0])
        } else {
            (src_view.shape().to_vec(), src_view.strides().to_vec())
        };
        let src = src_view.data_ptr() as *const u8;
        let mut written = 0usize;
        for_each_offset(&src_shape, &src_strides, |offset| {
            let row = written / per_row;
            let within = written % per_row;
            let dst_elem = (row * k + j) * per_row + within;
            // SAFETY: source offsets come from a validated view of the table's buffer; the
            // destination index is below numel because each column contributes n * per_row
            // elements to its own k slot.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.offset(offset as isize * item as isize),
                    dst.add(dst_elem * item),
                    item,
                );
            }
            written += 1;
        });
    }
    Ok(out)
}
