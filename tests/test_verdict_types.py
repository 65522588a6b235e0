"""A verdict's reasons, qualifiers and next steps are frozen msgspec Structs (issue 55: a frozen
dataclass cost 0.4 ms to create at import, 45 of them 16 ms of `report`'s start-up). They must
keep what the dataclasses gave: keyword-only fields, frozen, equal and hashed by value, a class
`kind` (or `key`), pickled across worker processes and Ray unchanged."""

from __future__ import annotations

import pickle

import msgspec
import pytest

from dbo_trace.analysis import verdict

FAMILIES = (verdict.Reason, verdict.Qualifier, verdict.NextStep)


def _subclasses(base: type) -> list[type]:
    found = [c for c in vars(verdict).values() if isinstance(c, type) and issubclass(c, base) and c is not base]
    assert found
    return found


KINDS = [c for base in FAMILIES for c in _subclasses(base)]


def _filled(cls: type, marker: object) -> msgspec.Struct:
    """An instance with every field set to marker (a Struct's init checks no types)."""
    return cls(**{f.name: marker for f in msgspec.structs.fields(cls)})


@pytest.mark.parametrize("cls", KINDS, ids=lambda c: c.__name__)
def test_each_kind_keeps_the_dataclass_behaviour(cls: type) -> None:
    label = getattr(cls, "kind", None) or getattr(cls, "key", None)
    assert isinstance(label, str) and label
    fields = msgspec.structs.fields(cls)
    assert fields[0].name == "borderline" or not issubclass(cls, verdict.Reason)
    a, b = _filled(cls, 1.5), _filled(cls, 1.5)
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != _filled(cls, 2.5) or not fields
    assert pickle.loads(pickle.dumps(a)) == a
    if fields:
        with pytest.raises(AttributeError):
            setattr(a, fields[-1].name, 0)
        with pytest.raises(TypeError):
            cls(*(1.5 for _ in fields))  # keyword-only, as the dataclasses were


def test_kinds_are_distinct_within_a_family() -> None:
    for base in FAMILIES:
        labels = [getattr(c, "kind", None) or getattr(c, "key") for c in _subclasses(base)]
        bases = [c for c in _subclasses(base) if c.__subclasses__()]
        assert not bases  # one level: every kind is a leaf
        assert len(labels) == len(set(labels)), base.__name__
