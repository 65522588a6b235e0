"""Writing a file so that an interrupted write never leaves half of it where a reader looks, and,
unless replacing was asked for, never replaces a file that appeared since the caller looked."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from collections.abc import Iterable
from typing import Callable, Union

Data = Union[bytes, Iterable[bytes]]  # the file's bytes, whole or in pieces written in turn


def resolved(path: Path) -> Path:
    """path.resolve(), where a symlink loop is an OSError (ELOOP) on every Python: 3.10 to 3.12 raise
    RuntimeError, which no caller expects of a path the user gave."""
    try:
        return Path(path).resolve()
    except RuntimeError:
        raise OSError(errno.ELOOP, "a symlink loop", str(path)) from None


def followed(path: Path) -> Path:
    """The path resolved, or made absolute as given where it cannot be followed (a symlink loop: the
    input's own check names it); for what needs only its parts (a label, a default name)."""
    try:
        return resolved(path)
    except OSError:
        return Path(path).absolute()


def replace_file(path: Path, data: Data) -> None:
    """Write data to a fresh temporary file beside path, then rename it over path (atomic on one
    filesystem). The temporary name is new (O_EXCL), so a user's `x.tmp` is never touched and a
    symlink planted there is never followed; on any failure the temporary file is removed."""
    _write_beside(Path(path), data, os.replace)


def create_file(path: Path, data: Data) -> None:
    """As replace_file, but FileExistsError, and nothing replaced, if path exists when the data is
    in place: a check made earlier ("no such file") is only a check, and another process may have
    written path since. The temporary file is hard-linked to path, which fails if the name exists
    (a dangling symlink included); where the filesystem has no hard links, the name is reserved
    with O_CREAT|O_EXCL and the temporary renamed over the reservation."""
    _write_beside(Path(path), data, _link_new)


# Errors of a filesystem without hard links (FAT, some network and FUSE mounts).
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV, errno.ENOSYS}


def _link_new(tmp: str, path: Path) -> None:
    try:
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))  # FileExistsError if taken
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _write_beside(path: Path, data: Data, put: Callable[[str, Path], None]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or Path("."))
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, bytes):
                fh.write(data)
            else:
                fh.writelines(data)
        os.chmod(tmp, 0o644)
        put(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
