"""The preset schema *is* the spec dataclasses: this module turns a parsed TOML table into them, checks
every value against its field's type and metadata, and walks them back out for display and JSON.

A field says what it expects through ``dataclasses.field(metadata=doc(...))``: a help text, the
:mod:`~trnsim.hw.units` dimension of a quantity, allowed choices, whether strings (or mapping keys) are
dtype names. One generic builder reads all of that, so a new spec field needs no loader code, and every
error names the file and the dotted key (``core.sbuf.bytes``) and says what was expected.

Cross-field rules (SBUF bytes divisible by partitions, …) live with the dataclass in ``__post_init__``
and raise :class:`FieldIssue`; the builder re-raises it with the file and full key.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from trnsim.errors import NumericsError, SpecError
from trnsim.hw.units import DIMENSIONS, Dimension, format_quantity, parse_bytes, parse_quantity
from trnsim.numerics.formats import get_format

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


class FieldIssue(SpecError):
    """A cross-field rule failed. ``key`` is relative to the object that raised it."""

    def __init__(self, key: str, message: str, *, hint: str | None = None) -> None:
        self.key = key
        super().__init__(message, where=key, hint=hint)


def doc(
    text: str,
    *,
    dim: Dimension | None = None,
    choices: Mapping[str, str] | None = None,
    dtype: bool = False,
    check: Callable[[str], None] | None = None,
    low: float = 0.0,
    high: float | None = None,
    internal: bool = False,
) -> dict[str, Any]:
    """Field metadata. ``dim``: the value (or each mapping value) is a quantity of that dimension.
    ``dtype``: the value (or each mapping key) is a number-format name, canonicalised via
    :func:`canonical_dtype`. Numbers must be > ``low`` and ≤ ``high``. ``check`` raises ``ValueError``.
    ``internal`` fields are filled by the loader, never read from the file."""
    return {"doc": text, "dim": dim, "choices": choices, "dtype": dtype, "check": check,
            "low": low, "high": high, "internal": internal}


def canonical_dtype(name: str) -> str:
    """The ``trnsim.numerics`` name of a dtype or alias (``"fp8"`` → ``"fp8_e4m3"``)."""
    try:
        return get_format(name).name
    except NumericsError as exc:
        raise SpecError(f"unknown dtype {name!r}", hint=exc.hint) from None


def build(
    cls: type[T], table: object, *, file: str, key: str = "", extra: Mapping[str, object] | None = None
) -> T:
    """Construct dataclass ``cls`` from a TOML table, validating every field; ``extra`` fills the
    internal fields (not read from the file)."""
    if not isinstance(table, dict):
        raise SpecError(f"expected a table, got {_show(table)}", where=_where(file, key),
                        hint=f"write it as a [{key}] section" if key else None)
    data = cast("dict[str, Any]", table)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and not f.metadata.get("internal")}
    for name in data:
        if name not in fields:
            near = difflib.get_close_matches(name, fields, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise SpecError(f"unknown key {name!r}", where=_where(file, _join(key, name)),
                            hint=hint + f"valid keys here: {', '.join(fields)}")
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = dict(extra or {})
    for name, f in fields.items():
        sub = _join(key, name)
        if name in data:
            kwargs[name] = _convert(hints[name], data[name], f.metadata, file, sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            expects = _expects(hints[name], f.metadata)
            raise SpecError(f"missing required key {name!r}: {f.metadata.get('doc', '')}",
                            where=_where(file, sub), hint=f"add `{name} = …` ({expects})")
    try:
        return cls(**kwargs)
    except FieldIssue as issue:
        raise SpecError(issue.message, where=_where(file, _join(key, issue.key)), hint=issue.hint) from None


def _convert(tp: Any, value: object, meta: Mapping[str, Any], file: str, key: str) -> object:
    where = _where(file, key)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):  # `X | None`: present in the file, so convert as X
        (inner,) = [a for a in get_args(tp) if a is not type(None)]
        return _convert(inner, value, meta, file, key)
    if dataclasses.is_dataclass(tp):
        return build(cast("type[DataclassInstance]", tp), value, file=file, key=key)
    if origin is tuple:
        if not isinstance(value, list):
            raise SpecError(f"expected a list, got {_show(value)}", where=where)
        items = cast("list[object]", value)
        return tuple(_convert(get_args(tp)[0], v, meta, file, f"{key}[{i}]") for i, v in enumerate(items))
    if origin is Mapping:
        if not isinstance(value, dict):
            raise SpecError(f"expected a table, got {_show(value)}", where=where)
        out: dict[str, object] = {}
        entries = cast("dict[str, object]", value)
        for k, v in entries.items():
            name = _dtype(k, _where(file, _join(key, k))) if meta.get("dtype") else k
            if name in out:
                raise SpecError(f"{k!r} names the same dtype as another key ({name})",
                                where=_where(file, _join(key, k)))
            out[name] = _convert(get_args(tp)[1], v, {**meta, "dtype": False}, file, _join(key, k))
        return out
    return _scalar(tp, value, meta, where)


def _scalar(tp: Any, value: object, meta: Mapping[str, Any], where: str) -> object:
    dim: Dimension | None = meta.get("dim")
    if tp is int and dim == "bytes":
        return parse_bytes(value, where=where)
    if tp is float and dim is not None:
        return parse_quantity(value, dim, where=where)
    if tp in (int, float):
        wrong = isinstance(value, bool) or not isinstance(value, int | float)
        if wrong or (tp is int and isinstance(value, float)):
            raise SpecError(f"expected {_expects(tp, meta)}, got {_show(value)}", where=where)
        number = cast(float, value)
        high: float | None = meta.get("high")
        if not number > meta.get("low", 0.0) or (high is not None and number > high):
            raise SpecError(f"{number!r} is out of range: expected {_expects(tp, meta)}", where=where)
        return int(number) if tp is int else float(number)
    if tp is bool:
        if not isinstance(value, bool):
            raise SpecError(f"expected true or false, got {_show(value)}", where=where)
        return value
    if tp is str:
        if not isinstance(value, str) or not value.strip():
            raise SpecError(f"expected a non-empty string, got {_show(value)}", where=where)
        return _string(value, meta, where)
    raise TypeError(f"spec field type {tp!r} has no converter")  # a bug in a spec dataclass, not in a file


def _string(value: str, meta: Mapping[str, Any], where: str) -> str:
    if meta.get("dtype"):
        return _dtype(value, where)
    choices: Mapping[str, str] | None = meta.get("choices")
    if choices is not None and value not in choices:
        near = difflib.get_close_matches(value, choices, n=1)
        raise SpecError(f"{value!r} is not one of: {', '.join(choices)}", where=where,
                        hint=f"did you mean {near[0]!r}?" if near else None)
    check: Callable[[str], None] | None = meta.get("check")
    if check is not None:
        try:
            check(value)
        except ValueError as exc:
            raise SpecError(f"bad value {value!r}: {exc}", where=where) from None
    return value


def _dtype(name: str, where: str) -> str:
    try:
        return canonical_dtype(name)
    except SpecError as exc:
        raise SpecError(exc.message, where=where, hint=exc.hint) from None


def _expects(tp: Any, meta: Mapping[str, Any]) -> str:
    if meta.get("dim"):
        return DIMENSIONS[meta["dim"]]
    if tp is int:
        return f"an integer > {meta.get('low', 0):g}"
    if tp is float:
        high = meta.get("high")
        return f"a number > {meta.get('low', 0):g}" + (f" and ≤ {high:g}" if high is not None else "")
    return str(meta.get("doc") or getattr(tp, "__name__", tp))


def _where(file: str, key: str) -> str:
    return f"{file}: {key}" if key else file


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _show(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def to_plain(obj: object) -> object:
    """JSON-ready form of a spec: quantities in SI base units (bytes, bytes/s, Hz, s, W, FLOP/s)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not f.metadata.get("internal")}
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v) for k, v in cast("Mapping[object, object]", obj).items()}
    if isinstance(obj, tuple | list):
        return [to_plain(v) for v in cast("tuple[object, ...]", obj)]
    return obj


def flatten(obj: object, prefix: str = "") -> list[tuple[str, str, str]]:
    """Every leaf of a spec as (dotted key, value with its unit, help text), in field order."""
    rows: list[tuple[str, str, str]] = []
    if not (dataclasses.is_dataclass(obj) and not isinstance(obj, type)):
        return rows
    for f in dataclasses.fields(obj):
        key, dim = _join(prefix, f.name), f.metadata.get("dim")
        value: object = getattr(obj, f.name)
        if f.metadata.get("internal") or (value is None and _is_section(type(obj), f.name)):
            continue  # an absent optional section ([core] on a GPU) is not a value
        items = cast("tuple[object, ...]", value) if isinstance(value, tuple) else ()
        if dataclasses.is_dataclass(value):
            rows += flatten(value, key)
        elif items and all(dataclasses.is_dataclass(v) for v in items):
            for i, item in enumerate(items):
                rows += flatten(item, f"{key}[{i}]")
        else:
            rows.append((key, _text(value, dim), f.metadata.get("doc", "")))
    return rows


def _is_section(cls: type, name: str) -> bool:
    return any(dataclasses.is_dataclass(a) for a in get_args(get_type_hints(cls)[name]))


def _text(value: object, dim: Dimension | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, Mapping):
        items = cast("Mapping[object, object]", value).items()
        return ", ".join(f"{k}: {_text(v, dim)}" for k, v in items) or "—"
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in cast("tuple[object, ...]", value)) or "—"
    if dim is not None and isinstance(value, int | float):
        return format_quantity(value, dim)
    return f"{value:g}" if isinstance(value, float) else str(value)


def read_toml(path: str | os.PathLike[str], what: str = "file") -> dict[str, Any]:
    """A TOML file's table; SpecError naming the file (and line, for syntax errors) if it cannot be read."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read {what}: {exc.strerror}", where=str(file)) from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{what} is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})",
                        where=str(file), hint="save it as UTF-8 TOML (is it the right file?)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # Python 3.11's TOMLDecodeError has no lineno attribute; the position is in the message.
        pos = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        where = f"{file}:{pos.group(1)}:{pos.group(2)}" if pos else str(file)
        raise SpecError(f"TOML syntax error: {re.sub(r' [(]at line.*', '', str(exc))}", where=where,
                        hint='fix the syntax at that line (quote strings: clock = "2.4 GHz")') from None


def build_file(cls: type[T], path: str | os.PathLike[str]) -> T:
    """``build(cls, ...)`` from a TOML file."""
    return build(cls, read_toml(path), file=str(path))
