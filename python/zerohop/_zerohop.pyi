# Type stubs for the `zerohop._zerohop` extension module (crates/zerohop-python/src/*.rs).
# Checked against the built module by scripts/stubtest.sh (mypy's stubtest).
#
# The extension's `memory` and `cuda` attributes are module objects that PyO3 does not
# register in sys.modules: `from zerohop._zerohop import memory` works, `import
# zerohop._zerohop.memory` does not. Their contents are described by the stub-only modules
# `_zerohop_memory.pyi` and `_zerohop_cuda.pyi` next to this file, bound
# here as attributes (there is no runtime module of those names to import).

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import (
    Any,
    ClassVar,
    Final,
    Literal,
    Protocol,
    Self,
    SupportsIndex,
    TypeAlias,
    TypedDict,
    final,
    overload,
    type_check_only,
)

from numpy.typing import NDArray

from . import _zerohop_cuda as cuda
from . import _zerohop_memory as memory

__all__ = [
    "__version__",
    "DLPACK_VERSION",
    "Tensor",
    "Table",
    "from_dlpack",
    "from_array_interface",
    "zeros",
    "from_arrow",
    "_rebuild_tensor",
    "_rebuild_table",
    "_pickling_across_machines",
    "_AcrossMachinesBlock",
    "OutOfMemoryError",
    "CudaError",
    "CopyWarning",
    "NoSuchColumnError",
    "StreamError",
    "memory",
    "cuda",
]

# A PyCapsule (DLPack tensors, Arrow C data, NumPy's memory handler). The standard library
# names its type only from Python 3.13 on.
if sys.version_info >= (3, 13):
    from types import CapsuleType

    _Capsule: TypeAlias = CapsuleType
else:
    _Capsule: TypeAlias = Any

__version__: Final[str]
#: The DLPack version zerohop speaks, (major, minor).
DLPACK_VERSION: Final[tuple[int, int]]

class OutOfMemoryError(MemoryError):
    # Set on every instance zerohop raises; in bytes.
    requested: int
    in_use: int
    limit: int

class CopyWarning(UserWarning):
    """zerohop made a copy because the caller allowed one (copy=True or materialize=...)."""

class NoSuchColumnError(KeyError, ValueError):
    """A table has no column of that name (a KeyError and a ValueError)."""

class StreamError(BufferError, ValueError):
    """A stream cannot order this hand-off (a BufferError and a ValueError)."""

class CudaError(RuntimeError):
    # Set on every instance zerohop raises: the call zerohop made, the driver's CUresult
    # and its symbol (CUDA_ERROR_ILLEGAL_ADDRESS, ...).
    call: str
    code: int
    name: str

@type_check_only
class _ArrayInterface(TypedDict):
    version: int
    shape: tuple[int, ...]
    typestr: str
    data: tuple[int, bool]
    strides: tuple[int, ...]

@type_check_only
class _CudaArrayInterface(TypedDict):
    version: int
    shape: tuple[int, ...]
    typestr: str
    data: tuple[int, bool]
    # None for compact (C-contiguous) data.
    strides: tuple[int, ...] | None
    stream: int

@type_check_only
class _SupportsArrayInterface(Protocol):
    @property
    def __array_interface__(self) -> Mapping[str, Any]: ...

@type_check_only
class _ArrowStreamExportable(Protocol):
    def __arrow_c_stream__(self) -> object: ...

@type_check_only
class _ArrowArrayExportable(Protocol):
    def __arrow_c_array__(self) -> tuple[object, object]: ...

@type_check_only
class _ArrowDeviceArrayExportable(Protocol):
    def __arrow_c_device_array__(self) -> tuple[object, object]: ...

@type_check_only
class _ArrowDeviceStreamExportable(Protocol):
    def __arrow_c_device_stream__(self) -> object: ...

# What `from_arrow` reads: any producer of the Arrow PyCapsule interface.
_ArrowData: TypeAlias = (
    _ArrowStreamExportable
    | _ArrowArrayExportable
    | _ArrowDeviceArrayExportable
    | _ArrowDeviceStreamExportable
)

@final
class Tensor:
    # DLPack 1.3's C exchange API (a capsule named "dlpack_exchange_api"), on the type.
    __dlpack_c_exchange_api__: ClassVar[_Capsule]
    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> _Capsule: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    # Each raises AttributeError for data of the other kind (host / CUDA).
    @property
    def __array_interface__(self) -> _ArrayInterface: ...
    @property
    def __cuda_array_interface__(self) -> _CudaArrayInterface: ...
    @property
    def stream(self) -> int: ...
    def set_stream(self, stream: int) -> None: ...
    def numpy(self) -> NDArray[Any]: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def is_copied(self) -> bool: ...
    @property
    def data_ptr(self) -> int: ...
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    def is_contiguous(self) -> bool: ...
    def to_framework(self, framework: str, *, copy: bool = False,
                     share_readonly: bool = False) -> Any: ...
    def copy(self) -> Tensor: ...
    def to(self, device: str, *, stream: int | None = None) -> Tensor: ...
    def __arrow_c_schema__(self) -> _Capsule: ...
    def __arrow_c_array__(
        self, requested_schema: object | None = None
    ) -> tuple[_Capsule, _Capsule]: ...
    def __arrow_c_device_array__(
        self, requested_schema: object | None = None, **kwargs: object
    ) -> tuple[_Capsule, _Capsule]: ...
    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]: ...
    def __len__(self) -> int: ...

# A schema item: (name, dtype), (name, dtype, shape), (name, dtype, (R, C), order), or a dict
# with keys "name", "dtype", "shape" (or "kind") and "order". dtype: a name ("float32"), a
# NumPy dtype or scalar type, or a torch dtype; shape: None or "column" (a value per row),
# "scalar" (one value per table), K (a vector per row) or (R, C) (a matrix per row); order:
# "row" (the default) or "col". The tuples are typed loosely on purpose: a schema written as
# a list of tuples of different lengths is inferred as list[tuple[str | int, ...]] and must
# type-check; the items are checked when the table is made.
_SchemaItem: TypeAlias = tuple[object, ...] | dict[str, Any]
# What `Table.schema` gives back: the constructor's tuple forms with dtype names.
_SchemaOut: TypeAlias = (
    tuple[str, str]
    | tuple[str, str, str]
    | tuple[str, str, int]
    | tuple[str, str, tuple[int, int]]
    | tuple[str, str, tuple[int, int], str]
)
# Tensor groups: {tensor: [columns]}, [(tensor, [columns])] or [column, ...].
_TensorSpec: TypeAlias = (
    str | Mapping[str, str | Sequence[str]] | Iterable[str | tuple[str, str | Sequence[str]]]
)
# {name: array} or [(name, array)], arrays from any DLPack producer. (dict[str, Any], not
# Mapping: other mappings are refused; not dict[str, object]: dicts are invariant.)
_NamedArrays: TypeAlias = dict[str, Any] | Sequence[tuple[str, object]]

# `framework` of `Table.tensors` and `Table.column`: None or "zerohop" (zerohop tensors),
# "numpy", "torch", "jax" or "tensorflow" (others raise ValueError). torch, jax and tensorflow
# give their own tensor types, typed Any here so that the stubs import none of them.
@final
class Table:
    def __new__(
        cls,
        schema: Iterable[_SchemaItem],
        rows: int,
        *,
        alignment: int = ...,
        readonly: bool = False,
        device: str = "cpu",
    ) -> Self: ...
    @staticmethod
    def from_columns(columns: _NamedArrays, *, alignment: int = ...) -> Table: ...
    # `buffer`: any DLPack producer whose compact memory already holds the layout.
    @staticmethod
    def wrap(
        buffer: object, schema: Iterable[_SchemaItem], rows: int, *, alignment: int = ...
    ) -> Table: ...
    @overload
    def tensors(
        self,
        spec: _TensorSpec,
        framework: Literal["zerohop"] | None = None,
        *,
        copy: bool = False,
        readonly: bool = False,
        order: Sequence[str] | None = None,
        materialize: Sequence[str] | None = None,
        fill: float | None = None,
        share_readonly: bool = False,
    ) -> list[Tensor]: ...
    @overload
    def tensors(
        self,
        spec: _TensorSpec,
        framework: Literal["numpy"],
        *,
        copy: bool = False,
        readonly: bool = False,
        order: Sequence[str] | None = None,
        materialize: Sequence[str] | None = None,
        fill: float | None = None,
        share_readonly: bool = False,
    ) -> list[NDArray[Any]]: ...
    @overload
    def tensors(
        self,
        spec: _TensorSpec,
        framework: str | None,
        *,
        copy: bool = False,
        readonly: bool = False,
        order: Sequence[str] | None = None,
        materialize: Sequence[str] | None = None,
        fill: float | None = None,
        share_readonly: bool = False,
    ) -> list[Any]: ...
    @overload
    def column(
        self,
        name: str,
        framework: Literal["zerohop"] | None = None,
        *,
        fill: float | None = None,
        copy: bool = False,
        share_readonly: bool = False,
    ) -> Tensor: ...
    @overload
    def column(
        self,
        name: str,
        framework: Literal["numpy"],
        *,
        fill: float | None = None,
        copy: bool = False,
        share_readonly: bool = False,
    ) -> NDArray[Any]: ...
    @overload
    def column(
        self,
        name: str,
        framework: str | None,
        *,
        fill: float | None = None,
        copy: bool = False,
        share_readonly: bool = False,
    ) -> Any: ...
    def __getitem__(self, key: str, /) -> Tensor: ...
    def rows(self, start: int, stop: int) -> Table: ...
    def describe(self) -> str: ...
    def __len__(self) -> int: ...
    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]: ...
    @property
    def columns(self) -> list[str]: ...
    @property
    def schema(self) -> list[_SchemaOut]: ...
    @property
    def storage(self) -> Literal["soa", "arrow", "device"]: ...
    @property
    def alignment(self) -> int | None: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def data_ptr(self) -> int | None: ...
    @property
    def readonly(self) -> bool: ...
    @overload
    @staticmethod
    def from_arrow(
        data: _ArrowData, *, copy: bool = False, chunks: Literal[False] = False
    ) -> Table: ...
    @overload
    @staticmethod
    def from_arrow(
        data: _ArrowData, *, copy: Literal[False] = False, chunks: Literal[True]
    ) -> list[Table]: ...
    @overload
    @staticmethod
    def from_arrow(
        data: _ArrowData, *, copy: bool = False, chunks: bool = False
    ) -> Table | list[Table]: ...
    @staticmethod
    def from_tensors(columns: _NamedArrays) -> Table: ...
    def to_arrow(self, *, copy: bool = False) -> Table: ...
    def to(self, device: str, *, stream: int | None = None) -> Table: ...
    @property
    def device(self) -> str: ...
    def to_soa(self, *, fill: float | None = None) -> Table: ...
    def __arrow_c_schema__(self) -> _Capsule: ...
    def __arrow_c_array__(
        self, requested_schema: object | None = None
    ) -> tuple[_Capsule, _Capsule]: ...
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> _Capsule: ...
    def __arrow_c_device_array__(
        self, requested_schema: object | None = None, **kwargs: object
    ) -> tuple[_Capsule, _Capsule]: ...
    def __arrow_c_device_stream__(
        self, requested_schema: object | None = None, **kwargs: object
    ) -> _Capsule: ...

def from_dlpack(
    obj: object, /, *, copy: bool | None = None, readonly: bool | None = None
) -> Tensor: ...
def from_array_interface(obj: _SupportsArrayInterface) -> Tensor: ...
# dtype: a name ("float32"), or a NumPy or torch dtype, as a Table's schema takes.
def zeros(shape: Sequence[int], dtype: object = "float32", device: str = "cpu") -> Tensor: ...
@overload
def from_arrow(
    data: _ArrowData, /, *, copy: bool = False, chunks: Literal[False] = False
) -> Table: ...
@overload
def from_arrow(
    data: _ArrowData, /, *, copy: Literal[False] = False, chunks: Literal[True]
) -> list[Table]: ...
@overload
def from_arrow(
    data: _ArrowData, /, *, copy: bool = False, chunks: bool = False
) -> Table | list[Table]: ...

# Pickle support: the callables `Tensor.__reduce_ex__` and `Table.__reduce_ex__` name. `data`
# is a buffer (bytes, PickleBuffer, ...), a shared-memory handle dict, or Arrow data.
def _rebuild_tensor(format: int, state: dict[str, Any], data: object) -> Tensor: ...
def _rebuild_table(format: int, state: dict[str, Any], data: object) -> Table: ...
# Whether objects pickle for another machine now (any open block, on any thread).
def _pickling_across_machines() -> bool: ...

# One open `zerohop.pickling(across_machines="bytes")` block, until `close()` or collection.
@final
class _AcrossMachinesBlock:
    def __init__(self) -> None: ...
    def close(self) -> None: ...
