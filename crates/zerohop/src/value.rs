//! Structured input as a face hands it over (Python's dict, list, tuple, int, str, bytes, bool
//! and None): pickled states, schemas and tensor specs in their structured forms. Every field
//! is looked up, type-checked and range-checked in the core, so a missing or mistyped field is
//! the same error whichever face received it.

use std::fmt;

use crate::error::{Error, Result};

/// How deep a face converts nested containers; deeper ones arrive as [`Value::Other`]. No
/// state nests deeper than 3 (table → schema → column), and a hostile pickle can nest a
/// million lists, which must not recurse here.
pub const MAX_DEPTH: usize = 6;

/// One value of a state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    None,
    Bool(bool),
    /// Any integer that fits 128 bits (a face refuses larger ones as `Other`).
    Int(i128),
    Str(String),
    Bytes(Vec<u8>),
    /// A tuple or a list.
    List(Vec<Value>),
    /// A dict with string keys, in the face's order.
    Dict(Vec<(String, Value)>),
    /// Anything else, by a short description (its type and, for small values, its repr), for
    /// messages only.
    Other(String),
}

impl Value {
    pub fn int(n: impl Into<i128>) -> Self {
        Value::Int(n.into())
    }

    /// A non-negative count or offset; `usize` always fits `i128`.
    pub fn count(n: usize) -> Self {
        Value::Int(n as i128)
    }

    pub fn str(s: impl Into<String>) -> Self {
        Value::Str(s.into())
    }

    pub fn ints(values: &[i64]) -> Self {
        Value::List(values.iter().map(|&v| Value::int(v)).collect())
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::str(s)
    }
}

/// Python's spelling, as a user of the face reads it in a message.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::None => f.write_str("None"),
            Value::Bool(true) => f.write_str("True"),
            Value::Bool(false) => f.write_str("False"),
            Value::Int(n) => write!(f, "{n}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Bytes(b) => write!(f, "<{} bytes>", b.len()),
            Value::List(items) => write!(f, "<a sequence of {}>", items.len()),
            Value::Dict(items) => write!(f, "<a dict of {} keys>", items.len()),
            Value::Other(shown) => f.write_str(shown),
        }
    }
}

/// The entries of a dict state, read by key: `what` names the state in messages ("pickled
/// zerohop data", "pickled CUDA handle").
#[derive(Clone, Copy)]
pub struct Fields<'a> {
    what: &'a str,
    items: &'a [(String, Value)],
}

impl<'a> Fields<'a> {
    /// The fields of `value`, which must be a dict.
    pub fn of(value: &'a Value, what: &'a str) -> Result<Self> {
        match value {
            Value::Dict(items) => Ok(Fields { what, items }),
            other => Err(Error::WrongType(format!(
                "{what}: the state must be a dict, got {other}"
            ))),
        }
    }

    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.items.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn required(&self, key: &str) -> Result<&'a Value> {
        self.get(key)
            .ok_or_else(|| Error::Wire(format!("{} lacks {key:?}", self.what)))
    }

    fn wrong(&self, key: &str, expected: &str, got: &Value) -> Error {
        Error::WrongType(format!(
            "{}: {key:?} must be {expected}, got {got}",
            self.what
        ))
    }

    /// An integer that fits `T` (a count, an offset, a pid).
    pub fn int<T: TryFrom<i128>>(&self, key: &str, expected: &str) -> Result<T> {
        match self.required(key)? {
            Value::Int(n) => {
                T::try_from(*n).map_err(|_| self.wrong(key, expected, &Value::Int(*n)))
            }
            other => Err(self.wrong(key, expected, other)),
        }
    }

    pub fn bool(&self, key: &str) -> Result<bool> {
        match self.required(key)? {
            Value::Bool(b) => Ok(*b),
            other => Err(self.wrong(key, "a bool", other)),
        }
    }

    pub fn str(&self, key: &str, expected: &str) -> Result<&'a str> {
        match self.required(key)? {
            Value::Str(s) => Ok(s),
            other => Err(self.wrong(key, expected, other)),
        }
    }

    /// A sequence of integers, each fitting `i64` (shapes and strides).
    pub fn ints(&self, key: &str) -> Result<Vec<i64>> {
        let expected = "a tuple of ints";
        match self.required(key)? {
            Value::List(items) => items
                .iter()
                .map(|v| match v {
                    Value::Int(n) => i64::try_from(*n).map_err(|_| self.wrong(key, expected, v)),
                    other => Err(self.wrong(key, expected, other)),
                })
                .collect(),
            other => Err(self.wrong(key, expected, other)),
        }
    }

    /// Exactly `N` bytes.
    pub fn bytes<const N: usize>(&self, key: &str) -> Result<[u8; N]> {
        match self.required(key)? {
            Value::Bytes(b) => b.as_slice().try_into().map_err(|_| {
                Error::Wire(format!(
                    "{}: {key:?} has {} bytes, not {N}",
                    self.what,
                    b.len()
                ))
            }),
            other => Err(self.wrong(key, "bytes", other)),
        }
    }

    /// A nested dict's fields.
    pub fn dict(&self, key: &str) -> Result<Fields<'a>> {
        match self.required(key)? {
            Value::Dict(items) => Ok(Fields {
                what: self.what,
                items,
            }),
            other => Err(self.wrong(key, "a dict", other)),
        }
    }

    /// `Some(field)` when present, `None` when absent.
    pub fn optional<T>(
        &self,
        key: &str,
        read: impl FnOnce(&Self) -> Result<T>,
    ) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => read(self).map(Some),
        }
    }
}

/// Builds a dict state entry by entry.
#[derive(Default)]
pub struct DictBuilder(Vec<(String, Value)>);

impl DictBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set(&mut self, key: &str, value: Value) -> &mut Self {
        self.0.push((key.to_owned(), value));
        self
    }

    pub fn build(&mut self) -> Value {
        Value::Dict(std::mem::take(&mut self.0))
    }
}
