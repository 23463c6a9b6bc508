"""The extension module's documentation and type stubs.

Every public name of `zerohop._zerohop` (its functions, classes and submodules, their
functions and classes, and the classes' public methods and properties) carries a docstring.
Docstrings come from the `///` comments in crates/zerohop-python/src (and the submodules'
`__doc__` set in lib.rs).

The stubs (python/zerohop/_zerohop*.pyi) are checked against the module by
scripts/stubtest.sh (`make stubtest`, part of `make test`).
"""

import inspect
from pathlib import Path


import zerohop._zerohop as extension



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
                     "memory", "memory.Resource.allocate", "cuda.synchronize",
                     "OutOfMemoryError"):
        assert expected in names
    assert not any(name.split(".")[-1].startswith("_") for name in names)


def test_every_public_name_has_a_docstring():
    missing = undocumented()
    assert not missing, (
        f"public names without a docstring: {sorted(missing)}; write the `///` doc comment in "
        "crates/zerohop-python/src"
    )
