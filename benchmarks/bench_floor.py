"""The floor under `report` on one core: how fast a gzipped Kineto trace can be inflated, and
inflated and parsed by msgspec into the least it can build per event (a struct of one field).

    python benchmarks/bench_floor.py TRACE.json.gz [...]

No reader of these traces in Python with msgspec can be faster than the second figure: every event
must be inflated and parsed. docs/performance.md compares it with `report`'s time.
"""

from __future__ import annotations

import argparse
import time
import zlib
from collections.abc import Iterator

import msgspec

BLOCK = 1 << 20


class _Phase(msgspec.Struct, gc=False):
    ph: str = ""


_parse = msgspec.json.Decoder(list[_Phase]).decode


def inflated(path: str) -> Iterator[bytes]:
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with open(path, "rb") as fh:
        while block := fh.read(BLOCK):
            yield inflate.decompress(block)


def inflate_only(path: str) -> int:
    return sum(len(b) for b in inflated(path))


def inflate_and_parse(path: str) -> int:
    """Events parsed. Cuts after each block's last `},` (Kineto's layout); the array's last event,
    after the last cut, is left out: one event in millions."""
    events, pending, started = 0, b"", False
    for block in inflated(path):
        pending += block
        if not started:
            at = pending.find(b'"traceEvents"')
            if at < 0:
                continue
            pending, started = pending[pending.index(b"[", at) + 1 :], True
        cut = pending.rfind(b"},")
        if cut > 0:
            events += len(_parse(b"[" + pending[: cut + 1] + b"]"))
            pending = pending[cut + 2 :]
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+")
    for path in parser.parse_args().traces:
        t = time.perf_counter()
        size = inflate_only(path)
        inflate_s = time.perf_counter() - t
        t = time.perf_counter()
        events = inflate_and_parse(path)
        parse_s = time.perf_counter() - t
        mb = size / 1e6
        print(
            f"{path}: {mb:.0f} MB of JSON, {events} events; inflate {inflate_s:.2f} s ({mb / inflate_s:.0f} MB/s); "
            f"inflate + least parse {parse_s:.2f} s ({mb / parse_s:.0f} MB/s)"
        )


if __name__ == "__main__":
    main()
