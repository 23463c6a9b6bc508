"""The extension module's documentation and type stubs.

Every public name of `zerohop._zerohop` (its functions, classes and submodules, their
functions and classes, and the classes' public methods and properties) carries a docstring,
except the names in KNOWN_UNDOCUMENTED, which may only shrink: a name missing a docstring
that is not in the set fails, and so does a name in the set that has one now (take it out).
Docstrings come from the `///` comments in crates/zerohop-python/src/*.rs.

The stubs (python/zerohop/_zerohop*.pyi) are checked against the module by
scripts/stubtest.sh (`make stubtest`, part of `make test`).
"""

import inspect
from pathlib import Path


import zerohop._zerohop as extension

#: Public names (relative to zerohop._zerohop) without a docstring today. Add the `///` doc
#: comment in the Rust source, rebuild, and remove the name here.
KNOWN_UNDOCUMENTED = {
    "Table.columns",
    "Table.nbytes",
    "Table.readonly",
    "Tensor.data_ptr",
    "Tensor.device",
    "Tensor.dtype",
    "Tensor.is_contiguous",
    "Tensor.is_copied",
    "Tensor.nbytes",
    "Tensor.ndim",
    "Tensor.readonly",
    "Tensor.shape",
    "Tensor.size",
    "cuda",
    "cuda.device_count",
    "cuda.is_available",
    "ecg",
    "memory",
    "memory.Block.nbytes",
    "memory.Block.ptr",
    "memory.Block.stream",
    "memory.Resource.device",
    "memory.arena",
    "memory.limit",
    "memory.log",
    "memory.pool",
    "memory.stats",
    "memory.system",
    "memory.tracking",
}


def _documentable(obj):
    """Objects that carry their own docstring; constants (`__version__`, a str) show their
    type's, so they are not checked."""
    return (inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj)
            or inspect.isdatadescriptor(obj))


def _class_members(prefix, cls):
    # Members the class itself defines (not inherited from object or an exception base).
    # getattr, not vars(), so that a staticmethod gives the function it wraps.
    for name in sorted(vars(cls)):
        if not name.startswith("_"):
            yield f"{prefix}.{name}", getattr(cls, name)


def _namespace_members(prefix, namespace):
    for name in sorted(dir(namespace)):
        if name.startswith("_"):
            continue
        obj = getattr(namespace, name)
        if not _documentable(obj):
            continue
        qualified = f"{prefix}{name}"
        yield qualified, obj
        if inspect.ismodule(obj):
            yield from _namespace_members(f"{qualified}.", obj)
        elif inspect.isclass(obj):
            yield from _class_members(qualified, obj)


def public_names():
    """{qualified name: object} for every public name of the extension module."""
    return dict(_namespace_members("", extension))


def undocumented():
    return {name for name, obj in public_names().items() if not (obj.__doc__ or "").strip()}


def test_the_walk_reaches_every_kind_of_public_name():
    names = public_names()
    for expected in ("from_dlpack", "Tensor", "Tensor.copy", "Tensor.shape", "Table.from_arrow",
                     "memory", "memory.Resource.allocate", "ecg.segment", "cuda.synchronize",
                     "OutOfMemoryError"):
        assert expected in names
    assert not any(name.split(".")[-1].startswith("_") for name in names)


def test_every_public_name_has_a_docstring_unless_known():
    missing = undocumented() - KNOWN_UNDOCUMENTED
    assert not missing, (
        f"public names without a docstring: {sorted(missing)}; write the `///` doc comment in "
        "crates/zerohop-python/src"
    )


def test_known_undocumented_names_are_still_undocumented():
    names = public_names()
    documented = (KNOWN_UNDOCUMENTED & names.keys()) - undocumented()
    gone = KNOWN_UNDOCUMENTED - names.keys()
    assert not (documented or gone), (
        f"take these out of KNOWN_UNDOCUMENTED: now documented {sorted(documented)}, no longer "
        f"public names {sorted(gone)}"
    )
