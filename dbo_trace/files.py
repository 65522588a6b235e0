"""Writing a file so that an interrupted write never leaves half of it where a reader looks."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_file(path: Path, data: bytes) -> None:
    """Write data to a fresh temporary file beside path, then rename it over path (atomic on one
    filesystem). The temporary name is new (O_EXCL), so a user's `x.tmp` is never touched and a
    symlink planted there is never followed; on any failure the temporary file is removed."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or Path("."))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
