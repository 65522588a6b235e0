"""The document from the analysis's types (issue 60): a document block that copies an analysis
dataclass field by field is a twin, a second declaration of the same figures kept equal by hand.

The rule: a msgspec Struct of dbo_trace.render.document is a twin of a dataclass of dbo_trace.analysis
(one with 3 fields or more) where the Struct has a field of the same name as at least 75% of the
dataclass's fields. At most a few may stay, each with a comment above its class saying why it is a
twin (the word "twin" in a comment line just above it, or among its decorators)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import typing
from pathlib import Path
from types import ModuleType

import msgspec

import dbo_trace.analysis
import dbo_trace.render.document

ALLOWED = 3  # twins that may stay, each saying why
COVER = 0.75  # the share of a dataclass's fields a Struct must hold to be its twin
FEWEST = 3  # a dataclass of fewer fields is no twin's measure (two names alike are a coincidence)


def _modules(package: ModuleType) -> list[ModuleType]:
    found = [package]
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        found.append(importlib.import_module(info.name))
    return found


def _classes(package: ModuleType, keep: typing.Callable[[type], bool]) -> list[type]:
    return [
        obj
        for module in _modules(package)
        for obj in vars(module).values()
        if inspect.isclass(obj) and obj.__module__ == module.__name__ and keep(obj)
    ]


def twins() -> list[tuple[type, type, float]]:
    """(Struct, dataclass, share of the dataclass's fields the Struct holds) for every twin, the best
    match of each Struct."""
    classes = _classes(dbo_trace.analysis, dataclasses.is_dataclass)
    measures = {c: {f.name for f in dataclasses.fields(c)} for c in classes}
    measures = {c: names for c, names in measures.items() if len(names) >= FEWEST}
    structs = _classes(dbo_trace.render.document, lambda c: issubclass(c, msgspec.Struct))
    found = []
    for struct in structs:
        held = set(struct.__struct_fields__)
        shares = [(len(held & names) / len(names), c) for c, names in measures.items()]
        share, best = max(shares, key=lambda s: s[0])
        if share >= COVER:
            found.append((struct, best, share))
    return found


def _says_why(cls: type) -> bool:
    """A comment line naming it a twin just above the class (or its decorators)."""
    lines, start = inspect.getsourcelines(cls)
    source = Path(inspect.getsourcefile(cls) or "").read_text().splitlines()
    i = start - 2  # the line above `class` (0-based)
    while i >= 0 and source[i].lstrip().startswith(("#", "@")):
        if source[i].lstrip().startswith("#") and "twin" in source[i].lower():
            return True
        i -= 1
    return False


def test_few_document_blocks_copy_an_analysis_dataclass():
    found = twins()
    for struct, dc, share in found:
        print(f"{struct.__module__}.{struct.__name__} ~ {dc.__module__}.{dc.__name__} ({share:.0%})")
    print(f"{len(found)} twins")
    assert len(found) <= ALLOWED, [f"{s.__name__} ~ {d.__name__}" for s, d, _ in found]
    assert [s.__name__ for s, _, _ in found if not _says_why(s)] == []


def test_the_document_retypes_no_vocabulary():
    """The document's vocabularies (labels, reasons, kinds) are the analysis's Literal types,
    imported: render/document/base.py assigns no Literal of its own."""
    base = Path(dbo_trace.render.document.base.__file__)
    tree = ast.parse(base.read_text())
    retyped = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal"
    ]
    assert retyped == [], f"{base}: Literal at lines {retyped}"
