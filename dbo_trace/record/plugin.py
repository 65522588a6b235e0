"""vLLM general-plugin entry point (group vllm.general_plugins), loaded in every vLLM process.

Does nothing unless DBO_TRACE_DIR is set. Then it opens this process's event
log under $DBO_TRACE_DIR/events/ and instruments vLLM's DBO classes.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from dbo_trace.record.hooks import Instrumentation, Target

ENV_DIR = "DBO_TRACE_DIR"
_log = logging.getLogger("dbo_trace")
_INSTALLED: "Instrumentation | None" = None


def register(extra_targets: Sequence["Target"] = ()) -> None:
    """vLLM calls this in every process; `dbo-trace demo` calls it too, with its own UBatchContext as extra."""
    global _INSTALLED
    folder = os.environ.get(ENV_DIR)
    if not folder or _INSTALLED is not None:
        return
    try:
        from dbo_trace.record.events import open_log
        from dbo_trace.record.hooks import Instrumentation
        from dbo_trace.record import control
        from dbo_trace.record.vllm_targets import OPTIONAL_TARGETS, TARGETS_BY_VERSION, targets_for, vllm_version

        version = vllm_version()
        targets, known = targets_for(version) if version else ([], True)
        ins = Instrumentation(open_log(folder, vllm=version or "absent"))
        ins.install([*targets, *extra_targets])
        if control.command_path() is not None:  # the recorder drives this server's profiler by file (peer.py)
            control.start()
            os.register_at_fork(after_in_child=control.after_fork_in_child)
        atexit.register(ins.quietly, ins.write_counters, "exit")
        # vLLM forks its engine core from the API server by default: the child must not write
        # into the parent's PID-named log and counters (the parent would overwrite them at exit).
        os.register_at_fork(after_in_child=lambda: ins.safely(ins.forked))
        if not known:
            newest = TARGETS_BY_VERSION[-1][0]
            _log.warning("dbo-trace: vLLM %s is not in the tested table; instrumenting as %s", version, newest)
        for name in ins.missing:
            if name not in OPTIONAL_TARGETS:
                _log.warning("dbo-trace: %s not found in vLLM %s; not instrumented", name, version)
        _INSTALLED = ins
    except Exception as exc:  # the plugin must never stop vLLM from starting
        _log.warning("dbo-trace: instrumentation disabled: %s: %s", type(exc).__name__, exc)


def installed() -> "Instrumentation | None":
    """This process's instrumentation, once register() turned it on."""
    return _INSTALLED
