"""A list whose items are built when first read: a long run's step reports (analysis/model.py
StepReports) and per-step blocks, of which the terminal shows 20 and the Markdown 200 of 100,000
(render/document/build.py build_document's lazy_steps). Neither analysis nor render: both use it."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from typing import Any, TypeVar, overload

T = TypeVar("T")
U = TypeVar("U")

_UNBUILT: Any = object()


class LazyList(Sequence[T]):
    """n items, item i built by build(i) on its first read and kept. Reads as a list does (len,
    index, slice, iteration, ==); msgspec cannot encode it, so a document holding one is never
    written out by mistake with items missing (--json builds its document whole)."""

    __slots__ = ("_build", "_items")

    def __init__(self, n: int, build: Callable[[int], T]) -> None:
        self._build = build
        self._items: list[T] = [_UNBUILT] * n

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return [self._item(k) for k in range(*i.indices(len(self._items)))]
        if i < 0:
            i += len(self._items)
        if not 0 <= i < len(self._items):
            raise IndexError(i)
        return self._item(i)

    def _item(self, i: int) -> T:
        if self._items[i] is _UNBUILT:
            self._fill(i)
        return self._items[i]

    def _fill(self, i: int) -> None:
        """Build item i (a subclass may build the items around it too, at once)."""
        self._items[i] = self._build(i)

    def __iter__(self) -> Iterator[T]:
        return (self._item(i) for i in range(len(self._items)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (list, LazyList)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # a list is not hashable either

    def __repr__(self) -> str:
        return f"LazyList({len(self)} items, {sum(x is not _UNBUILT for x in self._items)} built)"

    def built(self) -> int:
        """How many items were built so far (what a renderer read)."""
        return sum(x is not _UNBUILT for x in self._items)

    def mapped(self, f: Callable[[T], U]) -> LazyList[U]:
        """The items through f, each when first read."""
        return LazyList(len(self), lambda i: f(self._item(i)))


def concatenated(parts: Sequence[Sequence[T]]) -> LazyList[T]:
    """The parts one after another, as one lazy list reading through to them."""
    ends = list(accumulate(len(p) for p in parts))

    def build(i: int) -> T:
        k = bisect_right(ends, i)
        return parts[k][i - (ends[k - 1] if k else 0)]

    return LazyList(ends[-1] if ends else 0, build)
