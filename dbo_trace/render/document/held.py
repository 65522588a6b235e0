"""An analysis dataclass held in the document as it is (issue 60): where a block would only copy a
dataclass's fields and round its floats, the document holds the dataclass itself, rounded by one
function (`rounded`), so its JSON keys are the dataclass's fields in their order and no second
declaration of them is kept equal by hand.

msgspec encodes and decodes dataclasses (frozen ones too) with every field's type checked, but on
decoding it ignores a key the dataclass does not have, where every document block refuses one
(render/document/base.py, Struct). `strict_type` gives the document's type with each held dataclass
(and each Struct above one) made a Struct that refuses unknown keys, its fields the same names and
types, its whole numbers within 64 bits: an archive is decoded into it first (app/review_archive.py),
so a key the document does not have is refused wherever it is.

A held dataclass's field with a default is, in the strict form, `T | UnsetType = UNSET`: a key absent
from the archive (one a later version added) reads as UNSET, apart from a null the archive holds. The
archive's version checks (app/review_archive.py, _version_keys_problem) read that strict decoding;
the document itself decodes an absent key as the dataclass's default (None: not measured), and an
archive's --json is its stored bytes (commands/report.py), never a re-encoding that would write the
nulls the stored document never had. No document version is known to an analysis type: where a
later version added a figure the analysis always has, the document's subclass of the dataclass gives
it a default of None for an older archive (render/document/host.py ClocksBlock, overlap.py ContentionBlock)."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Annotated, Any, TypeVar

import msgspec
import numpy as np

T = TypeVar("T")

DIGITS = 3  # a figure's decimals in the document; a share's 4 (named per call)


def _round(value: object, digits: int, named: dict[str, int]) -> object:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (float, np.floating)):
        return round(float(value), digits)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, tuple):
        return tuple(_round(v, digits, named) for v in value)
    if isinstance(value, list):
        return [_round(v, digits, named) for v in value]
    if isinstance(value, dict):  # by rank (or step): its values rounded alike, its keys as they are
        return {k: _round(v, digits, named) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return rounded(value, **named)
    return value


def rounded(obj: T, **digits: int) -> T:
    """A copy of the dataclass `obj` (the same type) with each float rounded as the document rounds
    it: DIGITS decimals, or `digits[name]` for a field `name` (a share's 4), its own or of a dataclass
    within it (rounded alike); numpy scalars made Python's, floats in tuples, lists and dicts' values rounded alike."""
    assert dataclasses.is_dataclass(obj) and not isinstance(obj, type), obj
    changes = {
        f.name: _round(getattr(obj, f.name), digits.get(f.name, DIGITS), digits) for f in dataclasses.fields(obj) if f.init
    }
    return dataclasses.replace(obj, **changes)


# ---- decoding strictly --------------------------------------------------------------------------

_INT = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]


def _holds_dataclass(tp: Any, seen: frozenset[Any] = frozenset()) -> bool:
    if tp in seen:
        return False
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return True
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        hints = typing.get_type_hints(tp, include_extras=True)
        return any(_holds_dataclass(h, seen | {tp}) for h in hints.values())
    return any(_holds_dataclass(a, seen) for a in typing.get_args(tp) if not isinstance(a, msgspec.Meta))


@functools.cache
def strict_type(tp: Any) -> Any:
    """`tp` with every dataclass in it, and every Struct above one, as a Struct refusing unknown keys;
    a dataclass's field with a default reads an absent key as UNSET (a Struct's declare their own)."""
    if tp is int:
        return _INT
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or issubclass(tp, msgspec.Struct)):
        if not _holds_dataclass(tp):
            return tp
        hints = typing.get_type_hints(tp, include_extras=True)
        if dataclasses.is_dataclass(tp):
            names = [(f.name, f.default, f.default_factory) for f in dataclasses.fields(tp)]
        else:
            defaults = dict(zip(tp.__struct_fields__[len(tp.__struct_fields__) - len(tp.__struct_defaults__) :], tp.__struct_defaults__))
            names = [(n, defaults.get(n, dataclasses.MISSING), dataclasses.MISSING) for n in tp.__struct_fields__]
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        held = dataclasses.is_dataclass(tp)
        for name, default, factory in names:
            hint = strict_type(hints[name])
            if held and (default is not dataclasses.MISSING or factory is not dataclasses.MISSING):
                fields.append((name, typing.Union[hint, msgspec.UnsetType], msgspec.UNSET))
            elif default is not dataclasses.MISSING:
                fields.append((name, hint, default))
            elif factory is not dataclasses.MISSING:
                fields.append((name, hint, msgspec.field(default_factory=factory)))
            else:
                fields.append((name, hint))
        # kw_only: a dataclass's required field may follow defaulted ones (a kw_only subclass's); decoding is by name
        return msgspec.defstruct(tp.__name__, fields, forbid_unknown_fields=True, kw_only=True)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is None or not args:
        return tp
    if origin is Annotated:
        return Annotated[(strict_type(args[0]), *args[1:])] if args[0] is not int else tp
    new = tuple(strict_type(a) for a in args)
    if new == args:
        return tp
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(lambda a, b: a | b, new)
    if origin is typing.Literal:
        return tp
    return origin[new]  # list, tuple, dict
