"""Writing a file so that an interrupted write never leaves half of it where a reader looks."""

from __future__ import annotations

import os
from pathlib import Path


def replace_file(path: Path, data: bytes) -> None:
    """Write data beside path, then rename it over path (atomic on one filesystem)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
