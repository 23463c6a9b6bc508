//! The Python methods of `zerohop.Table`: construction, tensor maps, columns, Arrow import and
//! export, pickling. They sit above the protocol, storage and pickle modules they call.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use zerohop::soa::{ColumnOptions, MapOptions, SoaTable, SOA_DEFAULT_ALIGNMENT};
use zerohop::{Stream, TensorView};

use crate::base::errors::{warn_copy, IntoPyResult};
use crate::protocols::dlpack_import::from_dlpack;
use crate::tables::storage::{self, kind_name, Storage};
use crate::tables::table::{map_builder, parse_schema, resource_for, to_framework, PyTable};
use zerohop_pyo3::args::{self, extract_optional, named_items, MAX_NAMES};

/// One table per chunk of an Arrow import, each over its own chunk's buffers.
fn chunk_tables<'py>(
    py: Python<'py>,
    imported: zerohop::arrow::Imported,
) -> PyResult<Bound<'py, PyAny>> {
    let out = PyList::empty(py);
    match imported {
        zerohop::arrow::Imported::Host {
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
        device @ zerohop::arrow::Imported::Device(_) => {
            let from = Storage::from_import(device, false).py()?;
            out.append(PyTable::with_storage(from.table))?;
        }
    }
    Ok(out.into_any())
}

#[pymethods]
impl PyTable {
    #[new]
    #[pyo3(signature = (schema, rows, *, alignment=SOA_DEFAULT_ALIGNMENT, readonly=false, device="cpu"))]
    fn new(
        schema: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::rows)] rows: usize,
        #[pyo3(from_py_with = args::alignment)] alignment: usize,
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
        #[pyo3(from_py_with = args::alignment)] alignment: usize,
    ) -> PyResult<Self> {
        let mut views: Vec<(String, TensorView)> = Vec::new();
        for (name, array) in named_items(columns)? {
            views.push((name, from_dlpack(py, &array, None, None)?.view));
        }
        Ok(PyTable::from_table(
            SoaTable::from_views(&views, alignment).py()?,
        ))
    }

    /// A table over memory another framework allocated, no copy: `buffer` (any DLPack
    /// producer, compact; its bytes) already holds `rows` rows of `schema` laid out at
    /// `alignment`, as `Table(schema, rows, alignment=...)` lays them out (the CMS SoA
    /// layout). The producer lives as long as the table and every tensor from it; read-only
    /// memory gives a read-only table. Refused: a buffer too small or misaligned for the
    /// layout, or not one compact range.
    #[staticmethod]
    #[pyo3(signature = (buffer, schema, rows, *, alignment=SOA_DEFAULT_ALIGNMENT))]
    fn wrap(
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        schema: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::rows)] rows: usize,
        #[pyo3(from_py_with = args::alignment)] alignment: usize,
    ) -> PyResult<Self> {
        let schema = parse_schema(schema)?;
        let memory = from_dlpack(py, buffer, None, None)?;
        let table = SoaTable::over_view(schema, rows, alignment, &memory.view).py()?;
        Ok(PyTable::from_table(table))
    }

    /// Zero-copy tensors for `spec`, in spec order: {name: [cols]}, [(name, [cols])] or
    /// [col, …]. `framework` converts them ("torch", "jax", "numpy", "tensorflow"; default
    /// zerohop tensors). Every result shares the table's memory or is a copy reported by a
    /// `CopyWarning`, allowed only with `copy=True`: groups strides cannot describe, tensors
    /// JAX would not take in place (not 64-byte aligned), strided tensors for TensorFlow
    /// (which takes only C-contiguous memory), and read-only tensors for torch,
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
        order: Option<&Bound<'py, PyAny>>,
        materialize: Option<&Bound<'py, PyAny>>,
        fill: Option<f64>,
        share_readonly: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let order: Option<Vec<String>> = extract_optional(order, "order", MAX_NAMES)?;
        let materialize: Option<Vec<String>> =
            extract_optional(materialize, "materialize", MAX_NAMES)?;
        let mut builder = map_builder(spec)?;
        for name in materialize.unwrap_or_default() {
            builder = builder.materialize(&name);
        }
        if let Some(order) = order {
            builder = builder.order(&order);
        }
        let map = builder.build().py()?;
        let mapped = self
            .storage
            .map(
                &map,
                MapOptions {
                    readonly,
                    allow_copy: copy,
                },
                fill,
            )
            .py()?;
        let out = PyList::empty(py);
        let device = self.storage.device();
        let stream = match (framework, device.kind) {
            // Ordered once for the whole table: each tensor then leaves on torch's stream.
            (Some("torch"), zerohop::DeviceKind::Cuda) => {
                crate::tables::table::ready_for_torch(py, device, None, self.stream())?
            }
            _ => self.stream(),
        };
        for m in mapped {
            if let Some(reason) = &m.copy {
                let (name, columns) = (&m.name, &m.columns);
                warn_copy(
                    py,
                    &format!("tensor {name:?} (columns {columns:?}) was copied: {reason}"),
                )?;
            }
            out.append(to_framework(
                py,
                &m.name,
                m.view,
                m.copy.is_some(),
                framework,
                stream,
                copy,
                share_readonly,
            )?)?;
        }
        Ok(out)
    }

    /// One column as a zero-copy tensor (see `Table.tensors` for groups); `fill` replaces
    /// the nulls of an Arrow column (a reported copy). `copy=True` allows a reported copy
    /// where the memory cannot be shared: Arrow booleans (bits, unpacked to a byte each) and
    /// frameworks that would not share it (see `Table.tensors`).
    #[pyo3(signature = (name, framework=None, *, fill=None, copy=false, share_readonly=false))]
    fn column<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::column_name)] name: String,
        framework: Option<&str>,
        fill: Option<f64>,
        copy: bool,
        share_readonly: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = ColumnOptions {
            allow_copy: copy,
            fill,
        };
        let (view, copied) = self.storage.column(&name, options).py()?;
        if let Some(reason) = &copied {
            warn_copy(py, &format!("column {name:?} was copied: {reason}"))?;
        }
        to_framework(
            py,
            &name,
            view,
            copied.is_some(),
            framework,
            self.stream(),
            copy,
            share_readonly,
        )
    }

    fn __getitem__<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        self.column(py, name.to_owned(), None, None, false, false)
    }

    /// Rows `start..stop` as a table sharing this one's memory.
    fn rows(&self, start: usize, stop: usize) -> PyResult<PyTable> {
        Ok(PyTable::with_storage(
            self.storage.slice_rows(start, stop).py()?,
        ))
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
        crate::process::pickle::reduce_table(slf, &slf.get().storage, slf.get().stream(), protocol)
    }

    /// The column names, in schema order.
    #[getter]
    fn columns(&self) -> Vec<String> {
        self.storage.column_names()
    }

    /// SoA tables only: the schema items the constructor takes.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = crate::base::value::object_of(py, self.storage.schema_value().py()?)?;
        PyList::new(py, items.try_iter()?.collect::<PyResult<Vec<_>>>()?)
    }

    /// "soa" (one aligned buffer), "arrow" (shared Arrow columns) or "device" (shared CUDA
    /// columns).
    #[getter]
    fn storage(&self) -> &'static str {
        kind_name(&self.storage)
    }

    /// The alignment every column start of this SoA table (or row slice) really has; None
    /// for Arrow and device tables, whose columns are separate allocations.
    #[getter]
    fn alignment(&self) -> Option<usize> {
        self.soa().map(SoaTable::alignment)
    }

    /// The bytes the table occupies: the SoA buffer with its padding, or the Arrow or device
    /// columns' buffers.
    #[getter]
    fn nbytes(&self) -> usize {
        self.storage.nbytes()
    }

    /// The SoA buffer's address; None for Arrow and device tables.
    #[getter]
    fn data_ptr(&self) -> Option<usize> {
        self.soa().map(|t| t.buffer().as_ptr() as usize)
    }

    /// True when tensors of this table must not be written: a read-only SoA table, any Arrow
    /// table (Arrow data is immutable once shared), or read-only device columns.
    #[getter]
    fn readonly(&self) -> bool {
        self.storage.is_readonly()
    }

    fn __repr__(&self) -> String {
        format!(
            "zerohop.Table({} rows, columns {:?}, storage {:?})",
            self.storage.len(),
            self.columns(),
            kind_name(&self.storage)
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
        let imported = crate::protocols::arrow::import(py, data)?;
        if chunks {
            return chunk_tables(py, imported);
        }
        let zerohop::soa::FromImport {
            table: storage,
            copied,
            chunks,
        } = Storage::from_import(imported, copy).py()?;
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
        Ok(PyTable::with_storage(storage::storage_from_tensors(
            py, columns,
        )?))
    }

    /// This table on the Arrow side. SoA plain columns are shared; vector and matrix
    /// columns must be transposed into FixedSizeLists, which needs `copy=True` (reported).
    #[pyo3(signature = (*, copy=false))]
    fn to_arrow(&self, py: Python<'_>, copy: bool) -> PyResult<PyTable> {
        let (batch, copied) = self.storage.record_batch(copy).py()?;
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
    fn to(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::device)] device: String,
        stream: Option<usize>,
    ) -> PyResult<PyTable> {
        let table = self.storage.soa_to_move().py()?;
        let resource = resource_for(&device)?;
        let stream = stream.map_or(Ok(Stream::LEGACY), Stream::cuda).py()?;
        let (table, produced_on) = (table.clone(), self.stream);
        let copied = py
            .detach(move || table.moved_to(resource, stream, produced_on))
            .py()?;
        Ok(PyTable {
            storage: Storage::Soa(copied),
            stream,
            chunks: Vec::new(),
        })
    }

    /// Where the table's memory lives ("cpu", "cuda:0", …).
    #[getter]
    fn device(&self) -> String {
        self.storage.device().to_string()
    }

    /// An SoA copy of this table (one aligned buffer); nulls take `fill`.
    #[pyo3(signature = (*, fill=None))]
    fn to_soa(&self, fill: Option<f64>) -> PyResult<PyTable> {
        Ok(PyTable::from_table(self.storage.to_soa(fill).py()?))
    }

    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        storage::table_schema_capsule(py, &self.storage)
    }

    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        storage::table_array_capsules(py, &self.storage, requested_schema)
    }

    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        storage::table_stream_capsule(py, &self.storage, requested_schema, &self.chunks)
    }

    #[pyo3(signature = (requested_schema=None, **kwargs))]
    fn __arrow_c_device_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        crate::protocols::arrow::refuse_unknown_kwargs(kwargs)?;
        storage::table_device_array_capsules(py, &self.storage, requested_schema)
    }

    #[pyo3(signature = (requested_schema=None, **kwargs))]
    fn __arrow_c_device_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::protocols::arrow::refuse_unknown_kwargs(kwargs)?;
        storage::table_device_stream_capsule(py, &self.storage, requested_schema)
    }
}
