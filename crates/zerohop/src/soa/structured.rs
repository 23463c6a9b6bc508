//! The structured forms of a schema and of a tensor spec, as a face hands them over (Python's
//! tuples, lists and dicts, as [`Value`]s), read here once for every face; the string form of
//! a spec is the grammar of [`TensorMapBuilder::spec`].
//!
//! Schema items: `(name, dtype)`, `(name, dtype, shape)`, `(name, dtype, (R, C), order)` or
//! a dict with keys `name`, `dtype`, `shape` (or `kind`) and `order`; `shape` is absent/None
//! or "column" (per-row column), "scalar" (table scalar), K (vector) or (R, C) (matrix),
//! `order` "row"/"row-major"/"C" or "col"/"column"/"column-major"/"F".
//!
//! Tensor specs: the spec string ("pos: x, y; e"), `{name: [cols]}`, `[(name, [cols])]` or
//! `[col, …]` (each column its own tensor); a group's columns may be one name.

use super::{ColumnKind, ColumnSpec, ComponentOrder, Schema, TensorMap, TensorMapBuilder};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::value::Value;

fn invalid(what: &str, reason: String) -> Error {
    Error::Spec {
        what: what.into(),
        reason,
    }
}

fn wrong(reason: String) -> Error {
    Error::WrongType(reason)
}

fn order_of(value: &Value) -> Result<ComponentOrder> {
    match value {
        Value::Str(s) => match s.as_str() {
            "row" | "row-major" | "C" => Ok(ComponentOrder::RowMajor),
            "col" | "column" | "column-major" | "F" => Ok(ComponentOrder::ColumnMajor),
            other => Err(invalid(
                "matrix order",
                format!("{other:?} must be 'row' or 'col'"),
            )),
        },
        other => Err(wrong(format!(
            "matrix order {other} must be 'row' or 'col'"
        ))),
    }
}

fn size_of(value: &Value) -> Option<usize> {
    match value {
        Value::Int(n) => usize::try_from(*n).ok(),
        _ => None,
    }
}

fn kind_of(shape: Option<&Value>, order: Option<&Value>) -> Result<ColumnKind> {
    let order = match order {
        None | Some(Value::None) => None,
        Some(o) => Some(order_of(o)?),
    };
    match shape {
        None | Some(Value::None) => Ok(ColumnKind::Column),
        Some(Value::Str(word)) => match word.as_str() {
            "scalar" => Ok(ColumnKind::TableScalar),
            "column" => Ok(ColumnKind::Column),
            other => Err(invalid(
                "column kind",
                format!("{other:?} must be 'scalar', 'column', an int K or a pair (R, C)"),
            )),
        },
        Some(Value::Int(k)) if usize::try_from(*k).is_ok() => Ok(ColumnKind::Vector(*k as usize)),
        Some(Value::List(rc)) => match rc.as_slice() {
            [r, c] => match (size_of(r), size_of(c)) {
                (Some(rows), Some(cols)) => Ok(ColumnKind::Matrix {
                    rows,
                    cols,
                    order: order.unwrap_or(ComponentOrder::RowMajor),
                }),
                _ => Err(wrong(format!(
                    "matrix shape ({r}, {c}) must be two non-negative ints"
                ))),
            },
            _ => Err(wrong(format!(
                "column shape of {} values must be 'scalar', an int K or a pair (R, C)",
                rc.len()
            ))),
        },
        Some(other) => Err(wrong(format!(
            "column shape {other} must be 'scalar', an int K or a pair (R, C)"
        ))),
    }
}

fn column_of(item: &Value) -> Result<ColumnSpec> {
    let (name, dtype, shape, order) = match item {
        Value::List(parts) if (2..=4).contains(&parts.len()) => {
            (&parts[0], &parts[1], parts.get(2), parts.get(3))
        }
        Value::List(parts) => {
            return Err(invalid(
                "schema item",
                format!(
                    "has {} parts; it must be (name, dtype[, shape[, order]])",
                    parts.len()
                ),
            ))
        }
        Value::Dict(entries) => {
            let get = |k: &str| entries.iter().find(|(key, _)| key == k).map(|(_, v)| v);
            let need =
                |k: &str| get(k).ok_or_else(|| invalid("schema item", format!("needs {k:?}")));
            (
                need("name")?,
                need("dtype")?,
                get("shape").or(get("kind")),
                get("order"),
            )
        }
        other => {
            return Err(wrong(format!(
                "schema item {other} must be a tuple or a dict"
            )))
        }
    };
    let (Value::Str(name), Value::Str(dtype)) = (name, dtype) else {
        return Err(wrong(format!(
            "schema item: name {name} and dtype {dtype} must be strings"
        )));
    };
    Ok(ColumnSpec {
        name: name.clone(),
        dtype: DType::from_name(dtype)?,
        kind: kind_of(shape, order)?,
    })
}

impl Schema {
    /// The schema a list of structured items describes (see the module's forms).
    pub fn from_value(items: &Value) -> Result<Schema> {
        let Value::List(items) = items else {
            return Err(wrong(format!(
                "a schema must be a list of items, got {items}"
            )));
        };
        Schema::new(items.iter().map(column_of).collect::<Result<_>>()?)
    }

    /// The schema as the items [`Schema::from_value`] reads: `(name, dtype)` for columns,
    /// `(name, dtype, "scalar")`, `(name, dtype, K)`, `(name, dtype, (R, C), order)`.
    pub fn to_value(&self) -> Value {
        let items = self.columns().iter().map(|c| {
            let mut item = vec![Value::str(c.name.as_str()), Value::str(c.dtype.to_string())];
            match c.kind {
                ColumnKind::TableScalar => item.push(Value::str("scalar")),
                ColumnKind::Column => {}
                ColumnKind::Vector(k) => item.push(Value::count(k)),
                ColumnKind::Matrix { rows, cols, order } => {
                    item.push(Value::List(vec![Value::count(rows), Value::count(cols)]));
                    let order = match order {
                        ComponentOrder::RowMajor => "row",
                        ComponentOrder::ColumnMajor => "col",
                    };
                    item.push(Value::str(order));
                }
            }
            Value::List(item)
        });
        Value::List(items.collect())
    }
}

/// A group's columns, borrowed from the spec (the builder copies them once).
fn columns_of(value: &Value) -> Result<Vec<&str>> {
    match value {
        Value::Str(one) => Ok(vec![one.as_str()]),
        Value::List(names) => names
            .iter()
            .map(|n| match n {
                Value::Str(s) => Ok(s.as_str()),
                other => Err(wrong(format!(
                    "a column name must be a string, got {other}"
                ))),
            })
            .collect(),
        other => Err(wrong(format!(
            "a tensor's columns must be a name or a list of names, got {other}"
        ))),
    }
}

impl TensorMapBuilder {
    /// Adds the groups of a spec in any of its forms (see the module's forms), in order.
    pub fn spec_value(self, spec: &Value) -> Result<Self> {
        match spec {
            Value::Str(text) => self.spec(text),
            Value::Dict(groups) => groups.iter().try_fold(self, |b, (name, cols)| {
                Ok(b.tensor(name, &columns_of(cols)?))
            }),
            Value::List(items) => items.iter().try_fold(self, |b, item| match item {
                Value::Str(name) => Ok(b.tensor(name, &[name])),
                Value::List(pair) if pair.len() == 2 => match &pair[0] {
                    Value::Str(name) => Ok(b.tensor(name, &columns_of(&pair[1])?)),
                    other => Err(wrong(format!(
                        "a tensor name must be a string, got {other}"
                    ))),
                },
                other => Err(wrong(format!(
                    "tensor spec item {other} must be a column name or (tensor_name, [columns])"
                ))),
            }),
            other => Err(wrong(format!(
                "a tensor spec must be a string, a dict or a list, got {other}"
            ))),
        }
    }
}

impl TensorMap {
    /// A map from a spec in any of its forms.
    pub fn from_value(spec: &Value) -> Result<TensorMap> {
        TensorMap::builder().spec_value(spec)?.build()
    }
}
