//! `zerohop.Table`: an SoA table from Python, and its tensor maps handed to frameworks.

use pyo3::exceptions::{PyBufferError, PyKeyError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};
use zerohop::dlpack::{export_versioned, ExportOptions};
use zerohop::soa::{
    ColumnKind, ColumnSpec, ComponentOrder, MapOptions, Schema, SoaTable, TensorMap,
    SOA_DEFAULT_ALIGNMENT,
};
use zerohop::{DType, Device, TensorView};

use crate::arrow_table::Storage;
use crate::errors::{warn_copy, IntoPyResult};
use crate::tensor::PyTensor;

/// A structure-of-arrays table: every column (table scalar, per-row column, vector[K],
/// matrix[R, C]) padded to the alignment in one buffer.
///
/// A table also wraps Arrow data (`zerohop.from_arrow`, `Table.from_tensors`) or CUDA
/// columns without copying them; `storage` says which.
#[pyclass(name = "Table", module = "zerohop", frozen)]
pub struct PyTable {
    storage: Storage,
    /// For SoA tables on a CUDA device: the stream their data is produced on (1: legacy).
    stream: usize,
    /// The batches an Arrow import arrived in, when there were several: a re-export streams
    /// them as they came (the storage holds their concatenation).
    chunks: Vec<zerohop::arrow::arrow_array::RecordBatch>,
}

fn parse_order(value: &Bound<'_, PyAny>) -> PyResult<ComponentOrder> {
    match value.extract::<String>()?.as_str() {
        "row" | "row-major" | "C" => Ok(ComponentOrder::RowMajor),
        "col" | "column" | "column-major" | "F" => Ok(ComponentOrder::ColumnMajor),
        other => Err(PyValueError::new_err(format!(
            "matrix order {other:?} must be 'row' or 'col'"
        ))),
    }
}

/// `shape`: None/"column" → per-row column, "scalar" → table scalar, K → vector, (R, C) →
/// matrix.
fn parse_kind(
    shape: Option<&Bound<'_, PyAny>>,
    order: Option<&Bound<'_, PyAny>>,
) -> PyResult<ColumnKind> {
    let order = order.map(parse_order).transpose()?;
    let Some(shape) = shape.filter(|s| !s.is_none()) else {
        return Ok(ColumnKind::Column);
    };
    if let Ok(word) = shape.extract::<String>() {
        return match word.as_str() {
            "scalar" => Ok(ColumnKind::TableScalar),
            "column" => Ok(ColumnKind::Column),
            other => Err(PyValueError::new_err(format!(
                "column kind {other:?} must be 'scalar', 'column', an int K or a pair (R, C)"
            ))),
        };
    }
    if let Ok(k) = shape.extract::<usize>() {
        return Ok(ColumnKind::Vector(k));
    }
    if let Ok((rows, cols)) = shape.extract::<(usize, usize)>() {
        return Ok(ColumnKind::Matrix {
            rows,
            cols,
            order: order.unwrap_or(ComponentOrder::RowMajor),
        });
    }
    Err(PyTypeError::new_err(format!(
        "column shape {shape} must be 'scalar', an int K or a pair (R, C)"
    )))
}

/// Schema items: `(name, dtype)`, `(name, dtype, shape)`, `(name, dtype, (R, C), order)` or a
/// dict with keys name, dtype, shape, order.
fn parse_schema(schema: &Bound<'_, PyAny>) -> PyResult<Schema> {
    let mut columns = Vec::new();
    for item in schema.try_iter()? {
        let item = item?;
        let (name, dtype, shape, order) = if let Ok(d) = item.cast::<PyDict>() {
            let get = |k: &str| d.get_item(k);
            (
                get("name")?.ok_or_else(|| PyKeyError::new_err("schema item needs 'name'"))?,
                get("dtype")?.ok_or_else(|| PyKeyError::new_err("schema item needs 'dtype'"))?,
                get("shape")?.or(get("kind")?),
                get("order")?,
            )
        } else if let Ok(t) = item.cast::<PyTuple>() {
            if !(2..=4).contains(&t.len()) {
                return Err(PyValueError::new_err(format!(
                    "schema item {t} must be (name, dtype[, shape[, order]])"
                )));
            }
            (
                t.get_item(0)?,
                t.get_item(1)?,
                t.get_item(2).ok(),
                t.get_item(3).ok(),
            )
        } else {
            return Err(PyTypeError::new_err(format!(
                "schema item {item} must be a tuple or a dict"
            )));
        };
        let dtype_name = dtype_name(&dtype)?;
        columns.push(ColumnSpec {
            name: name.extract()?,
            dtype: DType::from_name(&dtype_name).py()?,
            kind: parse_kind(shape.as_ref(), order.as_ref())?,
        });
    }
    Schema::new(columns).py()
}

/// Accepts "float32", NumPy dtypes and scalar types (`np.float32`, ml_dtypes' `bfloat16`),
/// and torch dtypes.
fn dtype_name(dtype: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = dtype.cast::<PyString>() {
        return Ok(s.to_string());
    }
    if dtype.is_instance_of::<PyType>() {
        // A scalar type: NumPy knows its dtype (and says no for types it does not know).
        let numpy = dtype.py().import("numpy").map_err(|_| {
            PyTypeError::new_err(format!("dtype {dtype} is a type; name it as a string"))
        })?;
        let resolved = numpy
            .call_method1("dtype", (dtype,))
            .ok()
            // NumPy maps any other class to its object dtype, which holds no numbers.
            .filter(|d| d.getattr("kind").is_ok_and(|k| !k.eq("O").unwrap_or(true)))
            .ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "dtype {dtype} is not a NumPy scalar type; name it as a string \
                     (\"float32\")"
                ))
            })?;
        return resolved.getattr("name")?.extract();
    }
    let text = dtype.str()?.to_string();
    Ok(text.trim_start_matches("torch.").to_string())
}

fn schema_items<'py>(py: Python<'py>, schema: &Schema) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for c in schema.columns() {
        let dtype = c.dtype.to_string();
        let item = match c.kind {
            ColumnKind::TableScalar => (c.name.as_str(), dtype, "scalar").into_pyobject(py)?,
            ColumnKind::Column => (c.name.as_str(), dtype).into_pyobject(py)?,
            ColumnKind::Vector(k) => (c.name.as_str(), dtype, k).into_pyobject(py)?,
            ColumnKind::Matrix { rows, cols, order } => (
                c.name.as_str(),
                dtype,
                (rows, cols),
                if order == ComponentOrder::RowMajor {
                    "row"
                } else {
                    "col"
                },
            )
                .into_pyobject(py)?,
        };
        list.append(item)?;
    }
    Ok(list)
}

/// Groups from the Python spec forms: {name: [cols]}, [(name, [cols])], or [col, col, …]
/// (each column its own tensor).
fn parse_spec(spec: &Bound<'_, PyAny>) -> PyResult<Vec<(String, Vec<String>)>> {
    let mut groups = Vec::new();
    if let Ok(d) = spec.cast::<PyDict>() {
        for (k, v) in d.iter() {
            groups.push((k.extract()?, columns_of(&v)?));
        }
        return Ok(groups);
    }
    for item in spec.try_iter()? {
        let item = item?;
        if let Ok(name) = item.extract::<String>() {
            groups.push((name.clone(), vec![name]));
        } else if let Ok((name, cols)) = item.extract::<(String, Bound<'_, PyAny>)>() {
            groups.push((name, columns_of(&cols)?));
        } else {
            return Err(PyTypeError::new_err(format!(
                "tensor spec item {item} must be a column name or (tensor_name, [columns])"
            )));
        }
    }
    Ok(groups)
}

fn columns_of(value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(one) = value.extract::<String>() {
        return Ok(vec![one]);
    }
    value.extract()
}

/// A mapped tensor handed to `framework`, which must share its memory: a consumer that would
/// copy (JAX, for addresses it does not take) or that would ignore read-only (torch) gets the
/// data only as a reported copy, and only when `allow_copy` says so.
#[allow(clippy::too_many_arguments)]
fn to_framework<'py>(
    py: Python<'py>,
    name: &str,
    mut view: TensorView,
    mut copied: bool,
    framework: Option<&str>,
    stream: usize,
    allow_copy: bool,
    share_readonly: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let dlpack = intern!(py, "from_dlpack");
    let on_cuda = view.device().kind == zerohop::DeviceKind::Cuda;
    if framework == Some("torch") && view.is_readonly() && !copied && !share_readonly {
        // torch ignores DLPack's READ_ONLY flag: shared memory would be writable there.
        if !allow_copy {
            return Err(PyBufferError::new_err(format!(
                "tensor {name:?} is read-only (Arrow data always is), and torch ignores \
                 DLPack's read-only flag, so torch could write to it. Options: copy=True (a \
                 private, reported copy); share_readonly=True (the same memory, on your word \
                 that nothing writes to it through torch); or take it through NumPy, JAX or \
                 zerohop tensors, which keep it read-only"
            )));
        }
        view = view.private_copy().py()?;
        copied = true;
        warn_copy(
            py,
            &format!("tensor {name:?} is read-only and torch ignores that flag: copied"),
        )?;
    }
    let tensor = || {
        let t = if on_cuda {
            PyTensor::with_stream(view.clone(), copied, stream)
        } else {
            PyTensor::new(view.clone(), copied)
        };
        Bound::new(py, t)
    };
    match framework {
        None | Some("zerohop") => Ok(tensor()?.into_any()),
        // Device data goes through the protocol, so torch names its stream and waits on ours.
        Some("torch") if on_cuda => {
            let producer = if view.is_readonly() {
                // Reaching here read-only means share_readonly=True (see above).
                // SAFETY: the caller's word that nothing writes to it through torch.
                let alias = unsafe { view.clone().assume_never_written() };
                Bound::new(py, PyTensor::with_stream(alias, copied, stream))?
            } else {
                tensor()?
            };
            py.import(intern!(py, "torch"))?
                .call_method1(dlpack, (producer,))
        }
        Some("torch") => {
            let managed = export_versioned(&view, ExportOptions { is_copied: copied }).py()?;
            if view.device().is_host_accessible() {
                // C speed, no Python protocol calls; host memory needs no stream sync.
                if let Some(t) = crate::exchange::torch_tensor_from_managed(py, managed)? {
                    return Ok(t);
                }
            }
            // torch takes a capsule directly, skipping two Python-level protocol calls: half
            // the cost of `torch.from_dlpack(tensor)`.
            let capsule = crate::capsule::versioned_capsule(py, managed)?;
            py.import(intern!(py, "torch"))?
                .call_method1(dlpack, (capsule,))
        }
        Some("numpy") => py
            .import(intern!(py, "numpy"))?
            .call_method1(dlpack, (tensor()?,)),
        Some("jax") => {
            // JAX asks for legacy capsules, which cannot carry the read-only mark; its arrays
            // are immutable, so it may share read-only memory all the same.
            let shared = if view.is_readonly() {
                // SAFETY: the alias goes to jax.numpy.from_dlpack alone, and JAX never writes
                // to the memory behind an array.
                let alias = unsafe { view.clone().assume_never_written() };
                Bound::new(py, PyTensor::new(alias, copied))?
            } else {
                tensor()?
            };
            let array = py
                .import(intern!(py, "jax.numpy"))?
                .call_method1(dlpack, (shared,))?;
            if view.numel() > 0 && !copied {
                jax_shares(py, name, &view, &array, allow_copy)?;
            }
            Ok(array)
        }
        Some(other) => Err(PyValueError::new_err(format!(
            "framework {other:?} must be 'torch', 'jax', 'numpy' or None (zerohop tensors)"
        ))),
    }
}

/// JAX copies what it cannot take in place (on the CPU: addresses that are not 64-byte
/// aligned) without saying so; compare the address it ended up with.
fn jax_shares(
    py: Python<'_>,
    name: &str,
    view: &TensorView,
    array: &Bound<'_, PyAny>,
    allow_copy: bool,
) -> PyResult<()> {
    let address: usize = array
        .call_method0(intern!(py, "unsafe_buffer_pointer"))?
        .extract()?;
    let ours = view.data_ptr() as usize;
    if address == ours {
        return Ok(());
    }
    let why = format!(
        "JAX copied tensor {name:?}: it starts at 0x{ours:x} ({} bytes past a 64-byte \
         boundary), and JAX takes only 64-byte-aligned memory in place",
        ours % 64
    );
    if allow_copy {
        return warn_copy(py, &why);
    }
    Err(PyBufferError::new_err(format!(
        "{why}. Options: copy=True (a reported copy); a table with alignment >= 64; or, with \
         alignment equal to the element size, a row count whose columns end on 64-byte \
         boundaries (a multiple of 16 rows for float32)"
    )))
}

/// `{name: array}` or `[(name, array)]`, as (name, array) pairs in order.
pub fn named_items<'py>(columns: &Bound<'py, PyAny>) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    if let Ok(d) = columns.cast::<PyDict>() {
        return d.iter().map(|(k, v)| Ok((k.extract()?, v))).collect();
    }
    columns.extract()
}

/// The resource a table on `device` comes from: the device's current resource, else plain
/// device memory ("cuda:N"), pinned host memory ("cuda_host") or the host default ("cpu").
fn resource_for(device: &str) -> PyResult<std::sync::Arc<dyn zerohop::MemoryResource>> {
    let device = Device::parse(device).py()?;
    if let Some(current) = zerohop::memory::current_resource(device) {
        return Ok(current);
    }
    Ok(match device.kind {
        zerohop::DeviceKind::Cuda => {
            std::sync::Arc::new(zerohop::cuda::CudaDeviceResource::new(device.id).py()?)
        }
        zerohop::DeviceKind::CudaHost => {
            std::sync::Arc::new(zerohop::cuda::CudaPinnedResource::new(device.id).py()?)
        }
        _ => {
            return Err(PyValueError::new_err(format!(
                "tables live on cpu, cuda:N or cuda_host, not {device}"
            )))
        }
    })
}

impl PyTable {
    /// One table per chunk of an Arrow import, each over its own chunk's buffers.
    fn chunk_tables<'py>(
        py: Python<'py>,
        imported: crate::arrow::Imported,
    ) -> PyResult<Bound<'py, PyAny>> {
        let out = PyList::empty(py);
        match imported {
            crate::arrow::Imported::Host {
                batches,
                schema,
                realigned,
            } => {
                if !realigned.is_empty() {
                    warn_copy(
                        py,
                        &format!(
                            "Arrow columns {realigned:?} were copied (under-aligned buffers \
                             are realigned by arrow-rs)"
                        ),
                    )?;
                }
                let batches = if batches.is_empty() {
                    vec![zerohop::arrow::arrow_array::RecordBatch::new_empty(schema)]
                } else {
                    batches
                };
                for batch in batches {
                    out.append(PyTable::with_storage(Storage::Arrow(batch)))?;
                }
            }
            device @ crate::arrow::Imported::Device(_) => {
                let from = crate::arrow_table::storage_from_import(py, device, false)?;
                out.append(PyTable::with_storage(from.storage))?;
            }
        }
        Ok(out.into_any())
    }

    pub fn from_table(table: SoaTable) -> Self {
        PyTable::with_storage(Storage::Soa(table))
    }

    fn with_storage(storage: Storage) -> Self {
        PyTable {
            storage,
            stream: zerohop::cuda::LEGACY_STREAM.0,
            chunks: Vec::new(),
        }
    }

    /// The stream a tensor of this table is produced on.
    fn stream(&self) -> usize {
        match &self.storage {
            Storage::Device { stream, .. } => *stream,
            _ => self.stream,
        }
    }

    fn soa(&self) -> Option<&SoaTable> {
        match &self.storage {
            Storage::Soa(t) => Some(t),
            _ => None,
        }
    }
}

#[pymethods]
impl PyTable {
    #[new]
    #[pyo3(signature = (schema, rows, *, alignment=SOA_DEFAULT_ALIGNMENT, readonly=false, device="cpu"))]
    fn new(
        schema: &Bound<'_, PyAny>,
        rows: usize,
        alignment: usize,
        readonly: bool,
        device: &str,
    ) -> PyResult<Self> {
        let schema = parse_schema(schema)?;
        let resource = resource_for(device)?;
        let mut table = SoaTable::with_options(schema, rows, alignment, resource).py()?;
        if readonly {
            table = table.into_readonly();
        }
        Ok(PyTable::from_table(table))
    }

    /// A table holding copies of `columns` ({name: array} or [(name, array)]), with the
    /// schema inferred: 0-d → table scalar, (n,) → column, (n, K) → vector, (n, R, C) →
    /// row-major matrix. Arrays may come from any DLPack producer.
    #[staticmethod]
    #[pyo3(signature = (columns, *, alignment=SOA_DEFAULT_ALIGNMENT))]
    fn from_columns(
        py: Python<'_>,
        columns: &Bound<'_, PyAny>,
        alignment: usize,
    ) -> PyResult<Self> {
        let pairs = named_items(columns)?;
        let from_dlpack = py.import("zerohop")?.getattr("from_dlpack")?;
        let mut views: Vec<(String, TensorView)> = Vec::new();
        let mut rows: Option<i64> = None;
        let mut specs = Vec::new();
        for (name, array) in pairs {
            let tensor = from_dlpack.call1((array,))?;
            let view = tensor.cast::<PyTensor>()?.get().view.clone();
            let shape = view.shape().to_vec();
            let kind = match shape.len() {
                0 => ColumnKind::TableScalar,
                1 => ColumnKind::Column,
                2 => ColumnKind::Vector(shape[1] as usize),
                3 => ColumnKind::Matrix {
                    rows: shape[1] as usize,
                    cols: shape[2] as usize,
                    order: ComponentOrder::RowMajor,
                },
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "column {name:?} has shape {shape:?}: 0 to 3 dimensions only"
                    )))
                }
            };
            if let Some(&n) = shape.first() {
                match rows {
                    Some(r) if r != n => {
                        return Err(PyValueError::new_err(format!(
                            "column {name:?} has {n} rows, earlier columns have {r}"
                        )))
                    }
                    _ => rows = Some(n),
                }
            }
            specs.push(ColumnSpec {
                name: name.clone(),
                dtype: view.dtype(),
                kind,
            });
            views.push((name, view));
        }
        let schema = Schema::new(specs).py()?;
        let resource =
            zerohop::memory::current_resource(Device::CPU).expect("the host always has a resource");
        let table =
            SoaTable::with_options(schema, rows.unwrap_or(0) as usize, alignment, resource).py()?;
        for (name, src) in &views {
            let dst = table.column_view(name).py()?;
            // SAFETY: the table is fresh and private to this call; sources are other memory.
            unsafe { dst.copy_from(src) }.py()?;
        }
        Ok(PyTable::from_table(table))
    }

    /// Zero-copy tensors for `spec`, in spec order: {name: [cols]}, [(name, [cols])] or
    /// [col, …]. `framework` converts them ("torch", "jax", "numpy"; default zerohop
    /// tensors). Every result shares the table's memory or is a copy reported by a
    /// `CopyWarning`, allowed only with `copy=True`: groups strides cannot describe, tensors
    /// JAX would not take in place (not 64-byte aligned), and read-only tensors for torch,
    /// which ignores DLPack's read-only flag (`share_readonly=True` shares them anyway, on the
    /// caller's word that nothing writes through torch). `materialize` names table-scalar
    /// tensors to expand instead of broadcasting.
    /// `fill` replaces nulls of Arrow columns (a reported copy); without it a column with
    /// nulls is an error, since tensors cannot mark missing values.
    #[pyo3(signature = (spec, framework=None, *, copy=false, readonly=false, order=None, materialize=None, fill=None, share_readonly=false))]
    #[allow(clippy::too_many_arguments)]
    fn tensors<'py>(
        &self,
        py: Python<'py>,
        spec: &Bound<'py, PyAny>,
        framework: Option<&str>,
        copy: bool,
        readonly: bool,
        order: Option<Vec<String>>,
        materialize: Option<Vec<String>>,
        fill: Option<f64>,
        share_readonly: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut builder = TensorMap::builder();
        for (name, cols) in parse_spec(spec)? {
            builder = builder.tensor(&name, &cols);
        }
        for name in materialize.unwrap_or_default() {
            builder = builder.materialize(&name);
        }
        if let Some(order) = order {
            builder = builder.order(&order);
        }
        let map = builder.build().py()?;
        let mapped = self.storage.map(
            &map,
            MapOptions {
                readonly,
                allow_copy: copy,
            },
            fill,
        )?;
        let out = PyList::empty(py);
        for mut m in mapped {
            if framework == Some("jax") && !m.view.is_dense() {
                // JAX imports only compact (possibly transposed) tensors.
                if !copy {
                    return Err(PyBufferError::new_err(format!(
                        "tensor {:?} has strides {:?} (padded or broadcast), and JAX accepts \
                         only compact tensors. Options: copy=True (a reported copy); \
                         materialize=[{:?}] for table scalars; or a table built with \
                         alignment equal to the element size, whose columns pack tightly",
                        m.name,
                        m.view.strides(),
                        m.name
                    )));
                }
                m.view = m.view.contiguous_copy().py()?;
                m.copied = true;
            }
            if m.copied {
                warn_copy(
                    py,
                    &format!(
                        "tensor {:?} (columns {:?}) was copied: its columns cannot be described \
                         by strides, its table scalars were materialised, or nulls were filled",
                        m.name, m.columns
                    ),
                )?;
            }
            out.append(to_framework(
                py,
                &m.name,
                m.view,
                m.copied,
                framework,
                self.stream(),
                copy,
                share_readonly,
            )?)?;
        }
        Ok(out)
    }

    /// One column as a zero-copy tensor (see `Table.tensors` for groups); `fill` replaces
    /// the nulls of an Arrow column (a reported copy). `copy=True` allows a reported copy
    /// where the framework would not share the memory (see `Table.tensors`).
    #[pyo3(signature = (name, framework=None, *, fill=None, copy=false, share_readonly=false))]
    fn column<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        framework: Option<&str>,
        fill: Option<f64>,
        copy: bool,
        share_readonly: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (view, copied) = self.storage.column(name, fill)?;
        if copied {
            warn_copy(py, &format!("column {name:?} was copied to fill its nulls"))?;
        }
        to_framework(
            py,
            name,
            view,
            copied,
            framework,
            self.stream(),
            copy,
            share_readonly,
        )
    }

    fn __getitem__<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        self.column(py, name, None, None, false, false)
    }

    /// Rows `start..stop` as a table sharing this one's memory.
    fn rows(&self, start: usize, stop: usize) -> PyResult<PyTable> {
        Ok(PyTable::with_storage(self.storage.slice(start, stop)?))
    }

    /// SoA tables: offsets, sizes, padding and pitch of every column; Arrow and device
    /// tables: each column's type, nulls and place.
    fn describe(&self) -> String {
        self.storage.describe()
    }

    fn __len__(&self) -> usize {
        self.storage.len()
    }

    /// Pickling (PEP 574): an SoA table's one buffer travels out of band from protocol 5 on
    /// (the receiver views it) or as a handle in `zerohop.memory.Shared` memory; Arrow tables
    /// go through pyarrow's pickling. Device tables are refused. See docs/processes.md.
    fn __reduce_ex__<'py>(slf: &Bound<'py, Self>, protocol: i32) -> PyResult<Bound<'py, PyTuple>> {
        crate::pickle::reduce_table(slf, &slf.get().storage, slf.get().stream(), protocol)
    }

    #[getter]
    fn columns(&self) -> Vec<String> {
        self.storage.column_names()
    }

    /// SoA tables only: the schema items the constructor takes.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        match self.soa() {
            Some(t) => schema_items(py, t.schema()),
            None => {
                let list = PyList::empty(py);
                for name in self.storage.column_names() {
                    let (view, _) = self.storage.column(&name, Some(0.0))?;
                    let dtype = view.dtype().to_string();
                    let item = match view.shape().len() {
                        1 => (name.as_str(), dtype).into_pyobject(py)?,
                        2 => (name.as_str(), dtype, view.shape()[1]).into_pyobject(py)?,
                        _ => (name.as_str(), dtype, (view.shape()[1], view.shape()[2]))
                            .into_pyobject(py)?,
                    };
                    list.append(item)?;
                }
                Ok(list)
            }
        }
    }

    /// "soa" (one aligned buffer), "arrow" (shared Arrow columns) or "device" (shared CUDA
    /// columns).
    #[getter]
    fn storage(&self) -> &'static str {
        self.storage.kind()
    }

    /// The alignment every column start of this SoA table (or row slice) really has; None
    /// for Arrow and device tables, whose columns are separate allocations.
    #[getter]
    fn alignment(&self) -> Option<usize> {
        self.soa().map(SoaTable::alignment)
    }

    #[getter]
    fn nbytes(&self) -> usize {
        match &self.storage {
            Storage::Soa(t) => t.layout().total_bytes,
            Storage::Arrow(b) => b.get_array_memory_size(),
            Storage::Device { columns, .. } => columns.iter().map(|(_, v)| v.nbytes()).sum(),
        }
    }

    /// The SoA buffer's address; None for Arrow and device tables.
    #[getter]
    fn data_ptr(&self) -> Option<usize> {
        self.soa().map(|t| t.buffer().as_ptr() as usize)
    }

    #[getter]
    fn readonly(&self) -> bool {
        match &self.storage {
            Storage::Soa(t) => t.is_readonly(),
            // Arrow data is immutable once shared.
            Storage::Arrow(_) => true,
            Storage::Device { columns, .. } => columns.iter().any(|(_, v)| v.is_readonly()),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "zerohop.Table({} rows, columns {:?}, storage {:?})",
            self.storage.len(),
            self.columns(),
            self.storage.kind()
        )
    }

    /// A table over Arrow data from any producer of the Arrow PyCapsule interface (pyarrow,
    /// polars, nanoarrow, …; device arrays too), sharing its memory. Data in several chunks
    /// is refused unless `chunks=True` (a list of tables, one per chunk, each sharing its
    /// chunk's memory) or `copy=True` (one table, the chunks concatenated: a reported copy).
    #[staticmethod]
    #[pyo3(signature = (data, *, copy=false, chunks=false))]
    fn from_arrow<'py>(
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        copy: bool,
        chunks: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        if chunks && copy {
            return Err(PyValueError::new_err(
                "chunks=True keeps every chunk as it is; copy=True joins them: choose one",
            ));
        }
        let imported = crate::arrow::import(py, data)?;
        if chunks {
            return Self::chunk_tables(py, imported);
        }
        let crate::arrow_table::FromImport {
            storage,
            copied,
            chunks,
        } = crate::arrow_table::storage_from_import(py, imported, copy)?;
        if !copied.is_empty() {
            warn_copy(
                py,
                &format!(
                    "Arrow columns {copied:?} were copied (under-aligned buffers are realigned \
                     by arrow-rs; several chunks are concatenated)"
                ),
            )?;
        }
        Ok(Bound::new(
            py,
            PyTable {
                chunks,
                ..PyTable::with_storage(storage)
            },
        )?
        .into_any())
    }

    /// A table sharing the memory of `columns` ({name: tensor} or [(name, tensor)], any
    /// DLPack producer): compact host tensors become Arrow columns, CUDA tensors device
    /// columns. Nothing is copied.
    #[staticmethod]
    fn from_tensors(py: Python<'_>, columns: &Bound<'_, PyAny>) -> PyResult<PyTable> {
        Ok(PyTable::with_storage(
            crate::arrow_table::storage_from_tensors(py, columns)?,
        ))
    }

    /// This table on the Arrow side. SoA plain columns are shared; vector and matrix
    /// columns must be transposed into FixedSizeLists, which needs `copy=True` (reported).
    #[pyo3(signature = (*, copy=false))]
    fn to_arrow(&self, py: Python<'_>, copy: bool) -> PyResult<PyTable> {
        let (batch, copied) = self.storage.record_batch(copy)?;
        if !copied.is_empty() {
            warn_copy(
                py,
                &format!("columns {copied:?} were transposed into Arrow FixedSizeLists (copies)"),
            )?;
        }
        Ok(PyTable::with_storage(Storage::Arrow(batch)))
    }

    /// This SoA table on `device` ("cuda:N", "cpu" or "cuda_host" for pinned memory): one
    /// copy of its buffer, enqueued on `stream` (a CUDA stream handle; default the legacy
    /// stream). Tensors of a device copy carry that stream, so consumers on other streams
    /// wait for the copy; a copy to the host is complete when this returns. From pinned host
    /// memory (a table made with device="cuda_host") the copy runs alongside the host.
    #[pyo3(signature = (device, *, stream=None))]
    fn to(&self, py: Python<'_>, device: &str, stream: Option<usize>) -> PyResult<PyTable> {
        let Storage::Soa(table) = &self.storage else {
            return Err(PyBufferError::new_err(format!(
                "to() moves SoA tables; this one has {} storage (to_soa() first)",
                self.storage.kind()
            )));
        };
        let resource = resource_for(device)?;
        let target = resource.device();
        let stream = stream.unwrap_or(zerohop::cuda::LEGACY_STREAM.0);
        if stream == 0 {
            return Err(PyValueError::new_err(
                "stream=0 is ambiguous; pass 1 for the legacy default stream",
            ));
        }
        let source = table.device();
        if source.kind == zerohop::DeviceKind::Cuda && self.stream != stream {
            // The copy reads data produced on this table's stream.
            zerohop::cuda::order_streams(
                source.id,
                zerohop::Stream(self.stream),
                zerohop::Stream(stream),
            )
            .py()?;
        }
        let table = table.clone();
        let copied = py
            .detach(move || table.copy_to(resource, zerohop::Stream(stream)))
            .py()?;
        if target.is_host_accessible() && source.kind == zerohop::DeviceKind::Cuda {
            let device = source.id;
            py.detach(move || zerohop::cuda::synchronize(device, zerohop::Stream(stream)))
                .py()?;
        }
        Ok(PyTable {
            storage: Storage::Soa(copied),
            stream,
            chunks: Vec::new(),
        })
    }

    /// Where the table's memory lives ("cpu", "cuda:0", …).
    #[getter]
    fn device(&self) -> String {
        match &self.storage {
            Storage::Soa(t) => t.device().to_string(),
            Storage::Arrow(_) => "cpu".into(),
            Storage::Device { columns, .. } => columns
                .first()
                .map_or("cpu".into(), |(_, v)| v.device().to_string()),
        }
    }

    /// An SoA copy of this table (one aligned buffer); nulls take `fill`.
    #[pyo3(signature = (*, fill=None))]
    fn to_soa(&self, fill: Option<f64>) -> PyResult<PyTable> {
        match &self.storage {
            Storage::Soa(t) => Ok(PyTable::from_table(t.clone())),
            Storage::Arrow(b) => Ok(PyTable::from_table(
                SoaTable::from_record_batch(
                    b,
                    zerohop::arrow::ImportOptions {
                        allow_copy: true,
                        fill,
                    },
                )
                .py()?,
            )),
            Storage::Device { .. } => Err(PyBufferError::new_err(
                "SoA tables live in host memory; copy the device columns to the host first",
            )),
        }
    }

    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.storage.schema_capsule(py)
    }

    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        self.storage.array_capsules(py, requested_schema)
    }

    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.storage
            .stream_capsule(py, requested_schema, Some(&self.chunks))
    }

    #[pyo3(signature = (requested_schema=None, **kwargs))]
    fn __arrow_c_device_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        crate::arrow::refuse_unknown_kwargs(kwargs)?;
        self.storage.device_array_capsules(py, requested_schema)
    }

    #[pyo3(signature = (requested_schema=None, **kwargs))]
    fn __arrow_c_device_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::arrow::refuse_unknown_kwargs(kwargs)?;
        self.storage.device_stream_capsule(py, requested_schema)
    }
}
