"""Griffe extension for the documentation build (mkdocs.yml loads it; it is not part of zerohop).

Most of zerohop's Python API lives in the compiled extension `zerohop._zerohop`. Griffe reads
it from `python/zerohop/_zerohop.pyi` when that stub file exists. Without the stubs it
inspects the compiled module, and two things stop names from resolving there:

* PyO3 classes report ``__module__ == "zerohop"``, so ``zerohop.Table`` (an import from
  ``._zerohop``) and ``zerohop._zerohop.Table`` (an alias back to ``zerohop.Table``) are an
  alias cycle; the same goes for ``Tensor`` and ``OutOfMemoryError``;
* the extension's submodules call themselves plain ``ecg``, ``memory`` and ``cuda``, so names
  such as ``zerohop.ecg.read_csv = _ecg.read_csv`` stay unresolved attributes.

For every public name of a zerohop module whose live value is an object of the compiled
extension, this extension keeps what griffe found when it resolves to a function or class
(through the stubs). Otherwise it points the name at the stub's object when the stub has one,
and failing that builds the function or class from the live object: its text signature
(PyO3 provides one) and its docstring. Where a stub object has no docstring, the live
docstring is filled in.
"""

from __future__ import annotations

import importlib
import inspect
import types

import griffe

_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: griffe.ParameterKind.positional_only,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: griffe.ParameterKind.positional_or_keyword,
    inspect.Parameter.VAR_POSITIONAL: griffe.ParameterKind.var_positional,
    inspect.Parameter.KEYWORD_ONLY: griffe.ParameterKind.keyword_only,
    inspect.Parameter.VAR_KEYWORD: griffe.ParameterKind.var_keyword,
}

#: Special methods worth documenting on the extension's classes (the protocols they speak).
_PROTOCOL_DUNDERS = {
    "__dlpack__", "__dlpack_device__", "__array_interface__", "__cuda_array_interface__",
    "__arrow_c_schema__", "__arrow_c_array__", "__arrow_c_stream__",
    "__arrow_c_device_array__", "__arrow_c_device_stream__", "__getitem__", "__len__",
    "__reduce_ex__",
}


def _compiled_objects():
    """id(object) -> its dotted path inside `zerohop._zerohop`, for everything the extension
    defines (module level and its submodules)."""
    ext = importlib.import_module("zerohop._zerohop")
    found = {}

    def walk(module, prefix):
        for name, value in vars(module).items():
            if name.startswith("__"):
                continue
            if isinstance(value, types.ModuleType):
                if prefix == "":
                    walk(value, f"{name}.")
                continue
            if callable(value):
                found.setdefault(id(value), f"{prefix}{name}")

    walk(ext, "")
    return found


def _docstring(obj, parent=None):
    text = inspect.getdoc(obj)
    if not text:
        return None
    # Rust-style "# Safety" lines would become page headings; keep them as bold text.
    lines = [f"**{line[2:]}**" if line.startswith("# ") else line for line in text.splitlines()]
    return griffe.Docstring("\n".join(lines), parent=parent)


def _parameters(func, *, method=False):
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return griffe.Parameters()
    params = []
    if method and (not signature.parameters or next(iter(signature.parameters)) != "self"):
        params.append(griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword))
    for p in signature.parameters.values():
        if p.default is inspect.Parameter.empty:
            default = None
        elif p.default is Ellipsis:  # PyO3 writes `...` for defaults it cannot spell
            default = "..."
        else:
            default = repr(p.default)
        params.append(griffe.Parameter(p.name, kind=_KINDS[p.kind], default=default))
    return griffe.Parameters(*params)


def _function(name, func, *, method=False):
    built = griffe.Function(name, parameters=_parameters(func, method=method))
    built.docstring = _docstring(func, built)
    return built


def _class(name, cls):
    bases = [b.__name__ for b in cls.__bases__ if b is not object]
    built = griffe.Class(name, bases=bases)
    built.docstring = _docstring(cls, built)
    if getattr(cls, "__text_signature__", None):
        init = griffe.Function("__init__", parameters=_parameters(cls, method=True))
        built.set_member("__init__", init)
    # PyO3's class dicts have no stable order: properties, then methods, each by name.
    entries = sorted(vars(cls).items(),
                     key=lambda item: (not isinstance(item[1], (types.GetSetDescriptorType,
                                                                 types.MemberDescriptorType,
                                                                 property)), item[0]))
    for member_name, raw in entries:
        if member_name.startswith("_") and member_name not in _PROTOCOL_DUNDERS:
            continue
        if isinstance(raw, (types.GetSetDescriptorType, types.MemberDescriptorType, property)):
            attr = griffe.Attribute(member_name)
            attr.docstring = _docstring(raw, attr)
            attr.labels.add("property")
            built.set_member(member_name, attr)
        elif isinstance(raw, staticmethod):
            func = _function(member_name, raw.__func__)
            func.labels.add("staticmethod")
            built.set_member(member_name, func)
        elif isinstance(raw, (types.MethodDescriptorType, types.WrapperDescriptorType,
                              types.FunctionType)):
            built.set_member(member_name, _function(member_name, raw, method=True))
        elif isinstance(raw, (types.BuiltinFunctionType, types.ClassMethodDescriptorType)):
            # PyO3 static methods show up as builtins bound to the class.
            func = _function(member_name, getattr(cls, member_name))
            func.labels.add("staticmethod")
            built.set_member(member_name, func)
    return built


def _resolves(member):
    """Whether griffe already has a function or class for this name."""
    try:
        target = member.final_target if member.is_alias else member
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return False
    return target.kind in (griffe.Kind.FUNCTION, griffe.Kind.CLASS)


def _stub_object(pkg, path):
    """The stubs' function or class for `path` (inside `zerohop._zerohop`). The stubs describe
    the extension's submodules in stub-only modules (`_zerohop_memory.pyi` for `memory`, ...)
    because those are not importable modules; look there too."""
    candidates = [f"_zerohop.{path}"]
    if "." in path:
        sub, rest = path.split(".", 1)
        candidates.append(f"_zerohop_{sub}.{rest}")
    for candidate in candidates:
        try:
            found = pkg[candidate]
            target = found.final_target if found.is_alias else found
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        if target.kind in (griffe.Kind.FUNCTION, griffe.Kind.CLASS):
            return target
    return None


def _fill_docstrings(obj, live):
    """Live docstrings where the stubs give none (the object and its direct members; members
    the class only inherits, such as `__new__`, have nothing to say), and a stub constructor
    written as `__new__` shown as the class's signature."""
    if obj.docstring is None:
        obj.docstring = _docstring(live, obj)
    if obj.kind is not griffe.Kind.CLASS:
        return
    own = vars(live)
    for name, member in obj.members.items():
        if member.is_alias or member.docstring is not None or name not in own:
            continue
        if isinstance(own[name], types.WrapperDescriptorType):
            continue  # slot wrappers: "Return len(self)." and the like
        member.docstring = _docstring(own[name], member)
    new = obj.members.get("__new__")
    if new is not None and "__init__" not in obj.members and not new.is_alias:
        params = list(new.parameters)
        if params and params[0].name == "cls":
            params[0] = griffe.Parameter("self", kind=params[0].kind)
        init = griffe.Function("__init__", parameters=griffe.Parameters(*params),
                               lineno=new.lineno, endlineno=new.endlineno)
        obj.del_member("__new__")
        obj.set_member("__init__", init)


def _drop_type_docstring(member, live):
    """Inspected constants (`DLPACK_VERSION`, `__version__`) carry their type's docstring
    (tuple's, str's); that says nothing about the constant."""
    try:
        target = member.final_target if member.is_alias else member
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return
    if (target.kind is griffe.Kind.ATTRIBUTE and target.docstring is not None
            and live is not None and target.docstring.value == inspect.getdoc(type(live))):
        target.docstring = None


def _fence_doctests(obj):
    """Docstring paragraphs that start with `>>>` (the package docstring's example) as code;
    Markdown would read the prompts as nested quotes."""
    docstring = obj.docstring
    if docstring is None or ">>>" not in docstring.value:
        return
    out, in_block = [], False
    for line in docstring.value.splitlines():
        starts = line.lstrip().startswith(">>>")
        if starts and not in_block:
            out.append("```pycon")
            in_block = True
        elif in_block and not line.strip():
            out.append("```")
            in_block = False
        out.append(line)
    if in_block:
        out.append("```")
    docstring.value = "\n".join(out)


def _modules(module):
    yield module
    for name, member in module.members.items():
        if not member.is_alias and member.kind is griffe.Kind.MODULE and not name.startswith("_"):
            yield from _modules(member)


class ZerohopRuntime(griffe.Extension):
    """See the module docstring."""

    def __init__(self):
        super().__init__()
        self._done = False

    def on_package(self, *, pkg, **kwargs):
        if pkg.path != "zerohop" or self._done:
            return
        self._done = True
        compiled = _compiled_objects()
        for module in list(_modules(pkg)):
            _fence_doctests(module)
            try:
                live_module = importlib.import_module(module.path)
            except ImportError:
                continue
            for name, member in list(module.members.items()):
                live = getattr(live_module, name, None)
                _drop_type_docstring(member, live)
                if name.startswith("_"):
                    continue
                path = compiled.get(id(live))
                if path is None:
                    continue
                if _resolves(member):
                    target = member.final_target if member.is_alias else member
                    _fill_docstrings(target, live)
                    continue
                stub = _stub_object(pkg, path)
                if stub is not None:
                    _fill_docstrings(stub, live)
                    module.set_member(name, griffe.Alias(name, stub, parent=module))
                elif inspect.isclass(live):
                    module.set_member(name, _class(name, live))
                else:
                    module.set_member(name, _function(name, live))
