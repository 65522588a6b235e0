"""Worker processes for reading traces (one trace's share, or one rank each).

multiprocessing and concurrent.futures' process pool are imported when a worker is first started,
not with this module: a small trace is read in one process, which needs neither (issue 55:
start-up)."""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

from dbo_trace.errors import Terminated
from dbo_trace.trace.alloc import reuse_freed_memory

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing.context import SpawnContext
    from multiprocessing.process import BaseProcess


def prepare_worker() -> None:
    """First thing in a worker: Ctrl-C reaches the whole process group, and the parent handles it
    (it stops its workers and says so in one line), so a worker must not print a traceback of its
    own; and freed memory is reused (trace/alloc.py)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reuse_freed_memory()


STOP_WAIT_S = 5.0  # for a terminated worker to be gone (it dies at SIGTERM: it sets no handler for it)

def _spawning() -> SpawnContext:
    """Workers are spawned, not forked: the parent may run a progress thread, whose locks a forked
    child would inherit held."""
    import multiprocessing

    return multiprocessing.get_context("spawn")


@contextmanager
def _handling(sig: signal.Signals, handler: Any) -> Iterator[None]:
    """For the block, sig handled by handler in this process. Only the main thread may set
    handlers: elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(sig, handler)
    try:
        yield
    finally:
        signal.signal(sig, previous)


def _children_ignore_ctrl_c() -> AbstractContextManager[None]:
    """Processes started in the block ignore Ctrl-C from their first instruction: an ignored signal
    stays ignored across exec, while a handler set by the worker itself comes only after its
    interpreter has started (seconds, under coverage), and a Ctrl-C before then printed a traceback.
    This process ignores Ctrl-C for the block too: a few milliseconds."""
    return _handling(signal.SIGINT, signal.SIG_IGN)


def spawn(target: Callable[..., None], args: tuple[Any, ...]) -> BaseProcess:
    """A started worker process running target(*args), with Ctrl-C ignored even while it imports.
    target calls prepare_worker() first."""
    process = _spawning().Process(target=target, args=args, daemon=True)
    with _children_ignore_ctrl_c():
        process.start()
    return process


@functools.cache
def _pool_class() -> type[ProcessPoolExecutor]:
    from concurrent.futures import ProcessPoolExecutor

    class _Pool(ProcessPoolExecutor):
        """A pool whose workers ignore Ctrl-C from their start: they are started inside submit()."""

        def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            with _children_ignore_ctrl_c():
                return super().submit(fn, *args, **kwargs)

    return _Pool


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


def sigterm_interrupts() -> AbstractContextManager[None]:
    """For the block, SIGTERM to this process raises Terminated (a KeyboardInterrupt) in the main
    thread, so whoever stops workers on Ctrl-C stops them on SIGTERM too. Its default, dying at once,
    left the workers running: they are not told (a spawned worker is a daemon only to a parent that
    exits normally). Only the main thread may set handlers: elsewhere the block runs as it is."""
    return _handling(signal.SIGTERM, _raise_terminated)


@contextmanager
def process_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """Spawned workers (as spawn()). Interrupted (Ctrl-C or SIGTERM) or failed, the workers are stopped
    at once instead of being waited for: they ignore Ctrl-C, and a rank's analysis may take many seconds."""
    with sigterm_interrupts():
        pool = _pool_class()(workers, mp_context=_spawning(), initializer=prepare_worker)
        try:
            yield pool
        except BaseException:
            processes = list((getattr(pool, "_processes", None) or {}).values())  # no public way before Python 3.14
            for process in processes:
                process.terminate()
            for process in processes:
                process.join(STOP_WAIT_S)
            # Once they are gone, the pool's manager thread ends at once: waiting for it here keeps it
            # from closing its wake-up pipe while the interpreter's exit hook writes to it (a race that
            # printed "Exception ignored ... Bad file descriptor" after the one-line message).
            pool.shutdown(wait=not any(p.is_alive() for p in processes), cancel_futures=True)
            raise
        pool.shutdown()
