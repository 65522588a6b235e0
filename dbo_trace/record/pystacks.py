"""Sampled Python stacks of the recorded servers, with py-spy, over the profiled load.

The torch profiler sees CPU ops and CUDA calls, not the Python between them; py-spy (a sampling
profiler made for this: it reads the interpreter's memory through ptrace, so it needs root or
CAP_SYS_PTRACE) sees that Python. One `py-spy record` per server process tree runs from just before
the profiler starts until the profiled load ends:

    py-spy record --pid PID --subprocesses --nonblocking --idle --threads --rate R --format chrometrace -o FILE

`--nonblocking` reads without pausing the process (the server's pace is not changed; a sample may
be torn, which py-spy drops), `--idle` keeps threads that wait (a thread blocked in a lock or a
sleep while the GPU idles is an answer too), `--subprocesses` follows the engine core and workers
below the API server, `--threads` puts each thread's native id (the trace's tid) outermost in its
stacks as a frame `thread (<id>)`, so samples join the trace's threads by id, not by guess. The file is py-spy's Chrome trace: B/E spans per (pid, thread) of the
sampled stacks, ts in microseconds from py-spy's own start; `started_unix_ns` in the manifest is
time.time_ns() just before py-spy was spawned (analysis aligns from there, docs/analysis.md).

Where py-spy is missing or may not attach, one line says so and the recording goes on.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

PYSTACKS_DIR = "pystacks"
DEFAULT_RATE_HZ = 100


@dataclass
class _Sampling:
    role: str
    pid: int
    path: Path
    log: Path
    proc: subprocess.Popen | None
    started_unix_ns: int
    note: str | None = None
    entry: dict = field(default_factory=dict)


class PythonSampler:
    def __init__(self, bundle: Path, rate_hz: int = DEFAULT_RATE_HZ, executable: str | None = None):
        self.bundle = bundle
        self.rate_hz = rate_hz
        self.executable = executable or shutil.which("py-spy")
        self._runs: list[_Sampling] = []

    def start(self, role: str, pid: int) -> str | None:
        """Start sampling `pid`'s tree; a note (why not) where it cannot, else None."""
        folder = self.bundle / PYSTACKS_DIR
        folder.mkdir(exist_ok=True)
        path, log = folder / f"{role}.json", folder / f"{role}.log"
        started = time.time_ns()
        if not self.executable:
            run = _Sampling(role, pid, path, log, None, started, "py-spy is not installed (pip install 'dbo-trace[record]')")
            self._runs.append(run)
            return run.note
        argv = [
            self.executable, "record", "--pid", str(pid), "--subprocesses", "--nonblocking", "--idle", "--threads",
            "--rate", str(self.rate_hz), "--format", "chrometrace", "-o", str(path),
        ]  # fmt: skip
        with open(log, "wb") as out:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                run = _Sampling(role, pid, path, log, None, started, f"py-spy could not start ({exc.strerror})")
                self._runs.append(run)
                return run.note
        run = _Sampling(role, pid, path, log, proc, started)
        self._runs.append(run)
        time.sleep(0.3)  # a refused attach (no ptrace permission) exits at once
        if proc.poll() is not None:
            run.note = f"py-spy could not attach to pid {pid} (exit status {proc.returncode}): {_last_line(log)}"
            return run.note
        return None

    def stop(self, timeout_s: float = 60.0) -> list[dict]:
        """Stop every sampler (SIGINT: py-spy writes its file then); the manifest's entries."""
        for run in self._runs:
            if run.proc is not None and run.proc.poll() is None:
                try:
                    os.killpg(run.proc.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout_s
        entries = []
        for run in self._runs:
            stopped = time.time_ns()
            code = None
            if run.proc is not None:
                try:
                    code = run.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    run.proc.kill()
                    code = run.proc.wait()
                    run.note = run.note or "py-spy did not write its samples in time; stopped"
            have = run.path.is_file() and run.path.stat().st_size > 0
            if run.proc is not None and not have and run.note is None:
                run.note = f"py-spy wrote no samples (exit status {code}): {_last_line(run.log)}"
            entries.append(
                {
                    "path": f"{PYSTACKS_DIR}/{run.path.name}" if have else None,
                    "role": run.role,
                    "pid": run.pid,
                    "rate_hz": self.rate_hz,
                    "started_unix_ns": run.started_unix_ns,
                    "stopped_unix_ns": stopped,
                    "exit_status": code,
                    "log": f"{PYSTACKS_DIR}/{run.log.name}" if run.log.is_file() else None,
                    "note": run.note,
                }
            )
        self._runs.clear()
        return entries


def _last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""
