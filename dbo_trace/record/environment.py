"""What a recording runs with: versions, GPUs, MPS, the environment (the settings parsed from a
`vllm serve` command line are dbo_trace/serve_args.py's, which the report and compare read too)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Iterable, Mapping

from dbo_trace import __version__
from dbo_trace.redact import redact_env

# Distributions whose versions a reviewer asks for first.
VERSIONED = ("vllm", "torch", "nvtx", "vllm-afd-plugin", "triton", "deep_ep")  # the AFD plugin's distribution name
# Environment variables that change what DBO does or how it is measured (kept, secrets redacted).
ENV_PREFIXES = ("VLLM_", "NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "DBO_TRACE_", "HF_", "OMP_", "NVIDIA_", "AFD_")


def versions(names: Iterable[str] = VERSIONED) -> dict[str, str | None]:
    found: dict[str, str | None] = {"dbo-trace": __version__, "python": platform.python_version()}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    if "vllm" in found and found["vllm"] is None:  # a source checkout on PYTHONPATH has no metadata
        from dbo_trace.record.vllm_targets import vllm_version

        found["vllm"] = vllm_version()
    return found


def gpus(timeout_s: float = 10.0) -> dict:
    """GPU names and driver from nvidia-smi; empty where there is none."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    rows = [line.split(", ") for line in out.strip().splitlines() if line.strip()]
    return {"names": [r[0] for r in rows], "driver": rows[0][1] if rows and len(rows[0]) > 1 else None}


def captured_env(env: dict[str, str] | None = None) -> dict[str, str]:
    source = os.environ if env is None else env
    return redact_env({k: v for k, v in sorted(source.items()) if k.startswith(ENV_PREFIXES)})


MPS_CONTROL = "nvidia-cuda-mps-control"
MPS_DEFAULT_PIPE = "/tmp/nvidia-mps"  # where the daemon listens when CUDA_MPS_PIPE_DIRECTORY is unset


def _mps_ask(env: Mapping[str, str], command: str, timeout_s: float) -> tuple[bool, str]:
    """(answered, reply) of one command to the MPS control daemon of `env`'s pipe directory. A control
    pipe left by an earlier `quit` is no daemon: only an answer counts (the client then prints
    "Cannot find MPS control daemon process" and exits non-zero)."""
    try:
        proc = subprocess.run(
            [MPS_CONTROL], input=command + "\n", capture_output=True, text=True, env=dict(env), timeout=timeout_s, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    reply = (proc.stdout + proc.stderr).strip()
    return proc.returncode == 0 and "cannot find" not in reply.lower(), reply


def mps_quit(env: Mapping[str, str], timeout_s: float = 60.0) -> bool:
    """Quit the MPS control daemon of `env`'s pipe directory (and its servers); whether it answered."""
    return _mps_ask(env, "quit", timeout_s)[0]


def mps_status(env: Mapping[str, str], pids_by_role: Mapping[str, Iterable[int]] | None = None, timeout_s: float = 5.0) -> dict:
    """Whether an MPS control daemon answers for `env` and, with `pids_by_role`, whether each role's
    processes are among its servers' clients (docs/recording.md, "An AFD pair on one GPU").
    `daemon`: "answered", "not running" or "unknown" (no control tool here)."""
    pipe = env.get("CUDA_MPS_PIPE_DIRECTORY") or MPS_DEFAULT_PIPE
    if shutil.which(MPS_CONTROL, path=env.get("PATH")) is None:
        return {"daemon": "unknown", "pipe_directory": pipe, "answer": f"no {MPS_CONTROL} on PATH"}
    answered, reply = _mps_ask(env, "get_server_list", timeout_s)
    if not answered:
        return {"daemon": "not running", "pipe_directory": pipe, "answer": reply[:300]}
    servers = [int(word) for word in reply.split() if word.isdigit()]
    status: dict = {"daemon": "answered", "pipe_directory": pipe, "servers": servers}
    if pids_by_role is not None:
        clients: set[int] = set()
        for server in servers:
            ok, listed = _mps_ask(env, f"get_client_list {server}", timeout_s)
            clients.update(int(word) for word in listed.split() if ok and word.isdigit())
        status["clients"] = sorted(clients)
        status["roles_as_clients"] = {role: bool(clients.intersection(pids)) for role, pids in pids_by_role.items()}
    return status


# ---- Whether the GPU takes a new CUDA client (a sweep, between its arms) ----------------------------
# Whether the GPU takes a new CUDA client: what a sweep waits for between arms.
#
# One arm's servers stop, and the next arm's start at once. Under MPS the server may still be cleaning
# up the last clients' contexts, and the next server's context fails with "CUDA-capable device(s)
# is/are busy or unavailable" (NVIDIA's MPS troubleshooting guide: "MPS Server Not Accepting New
# Client Requests", a temporary state during client termination cleanup or recovery). So before an
# arm starts its servers, the sweep waits until the last arm's clients have left the MPS server and a
# probe process can create a CUDA context with the servers' environment. Where the sweep runs its own
# MPS control daemon (`sweep --mps`), the daemon is started afresh between arms, as a new sweep call
# would have; a daemon the sweep did not start is never touched, and a failure says how to restart it.
#
# The probe runs in a child process: a context in the sweep's own process would be an MPS client and
# hold GPU memory for the whole sweep. It reads the driver through ctypes (libcuda), so it needs
# neither torch nor a CUDA toolkit, only the driver the servers use.

READY_TIMEOUT_S = 180.0  # the last arm's clients to leave and a context to succeed
POLL_S = 2.0
NO_DRIVER = 3  # the probe's exit status where there is no CUDA driver (nothing to wait for)

# A context on the first visible device, made and released: exit 0 where the GPU takes a client, 1 with
# the driver's error name where it does not, NO_DRIVER where libcuda is absent.
PROBE = r"""
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError:
    sys.exit(3)
def failed(rc):
    name = ctypes.c_char_p()
    cuda.cuGetErrorName(rc, ctypes.byref(name))
    print((name.value or b"CUDA error").decode("ascii", "replace"), rc)
    sys.exit(1)
rc = cuda.cuInit(0)
if rc:
    failed(rc)
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
rc = cuda.cuDeviceGet(ctypes.byref(dev), 0)
if rc:
    failed(rc)
rc = cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
if rc:
    failed(rc)
release = getattr(cuda, "cuDevicePrimaryCtxRelease_v2", None) or cuda.cuDevicePrimaryCtxRelease
release(dev)
"""


@dataclass(frozen=True)
class Probe:
    ready: bool | None  # None: no CUDA driver here (nothing to wait for)
    said: str  # the driver's error, where not ready


def probe_gpu(env: Mapping[str, str], timeout_s: float = 60.0) -> Probe:
    """One probe process with the servers' environment (CUDA_VISIBLE_DEVICES, the MPS pipe)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", PROBE], env=dict(env), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return Probe(False, f"no CUDA context within {timeout_s:.0f} s")
    except OSError as exc:
        return Probe(False, f"the probe did not start ({exc})")
    if proc.returncode == NO_DRIVER:
        return Probe(None, "no CUDA driver (libcuda.so.1)")
    said = " ".join((proc.stdout + proc.stderr).split())[-200:]
    return Probe(True, "") if proc.returncode == 0 else Probe(False, said or f"the probe exited with {proc.returncode}")


def mps_clients(env: Mapping[str, str]) -> list[int] | None:
    """The MPS servers' clients, or None where no control daemon answers for env."""
    status = mps_status(env, {})
    return status.get("clients", []) if status.get("daemon") == "answered" else None


class OwnMps:
    """An MPS control daemon the sweep started (`sweep --mps`), in user space: its pipe directory is
    CUDA_MPS_PIPE_DIRECTORY where set, else a new one under /tmp (a socket path must be short), set
    in this process's environment so that every server the sweep starts is its client."""

    def __init__(self, env: MutableMapping[str, str]) -> None:
        self.env = env
        if not env.get("CUDA_MPS_PIPE_DIRECTORY"):
            env["CUDA_MPS_PIPE_DIRECTORY"] = tempfile.mkdtemp(prefix="dbo-trace-mps-")
        env.setdefault("CUDA_MPS_LOG_DIRECTORY", env["CUDA_MPS_PIPE_DIRECTORY"] + "-log")
        self.started = False
        self.quit_here = False  # the sweep quit a daemon at this pipe: its leftover pipe files are stale

    @property
    def pipe(self) -> str:
        return self.env["CUDA_MPS_PIPE_DIRECTORY"]

    def answers(self) -> bool:
        return mps_status(self.env).get("daemon") == "answered"

    def start(self) -> str | None:
        """Start the daemon; None once it answers, else why not. A daemon that already answers at the
        pipe is someone else's: used as it is, never restarted (self.started stays False)."""
        if self.answers():
            return None
        if self.quit_here:  # a control pipe left by the daemon the sweep quit is no daemon: start clean
            shutil.rmtree(self.pipe, ignore_errors=True)
        for folder in (self.pipe, self.env["CUDA_MPS_LOG_DIRECTORY"]):
            os.makedirs(folder, exist_ok=True)
        try:
            subprocess.run([MPS_CONTROL, "-d"], env=self.env, capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{MPS_CONTROL} -d did not run ({exc})"
        if not _until(self.answers, 10.0):
            return f"the MPS control daemon started at {self.pipe} does not answer"
        self.started = True
        return None

    def stop(self) -> None:
        """Quit the daemon (and its servers) where the sweep started it."""
        if self.started:
            mps_quit(self.env)
            _until(lambda: not self.answers(), 30.0)
            self.started, self.quit_here = False, True

    def restart(self) -> str | None:
        if not self.started:
            return None
        self.stop()
        return self.start()


def wait_ready(
    env: Mapping[str, str],
    note: Callable[[str], None],
    own: OwnMps | None = None,
    timeout_s: float = READY_TIMEOUT_S,
    probe: Callable[[Mapping[str, str]], Probe] = probe_gpu,
    clients: Callable[[Mapping[str, str]], list[int] | None] = mps_clients,
) -> str | None:
    """Wait until the last arm's MPS clients are gone (restarting the sweep's own daemon then) and a
    probe makes a CUDA context. None once ready (or where there is no CUDA driver to ask), else the
    one-line reason the next arm must not start, saying what to do."""
    deadline = time.monotonic() + timeout_s
    said_wait = False
    while left := clients(env):
        if not said_wait:  # said once clients are seen, even where asking took the whole timeout
            note(f"waiting for the last arm's {len(left)} MPS client(s) to leave the GPU")
            said_wait = True
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    if own is not None and own.started:
        failed = own.restart()
        if failed:
            return f"the sweep's MPS daemon did not start again: {failed}"
        note(f"MPS: the sweep's control daemon started afresh ({own.pipe})")
    last = Probe(False, "")
    while True:
        last = probe(env)
        if last.ready is not False:
            return None
        if time.monotonic() >= deadline:
            break
        if not said_wait:
            note(f"waiting for the GPU to take a new CUDA client ({last.said})")
            said_wait = True
        time.sleep(POLL_S)
    pipe = env.get("CUDA_MPS_PIPE_DIRECTORY") or MPS_DEFAULT_PIPE
    how = (
        f"; the MPS daemon at {pipe} may be stuck: restart it (echo quit | nvidia-cuda-mps-control; "
        "nvidia-cuda-mps-control -d), or let the sweep run its own (--mps)"
        if clients(env) is not None and (own is None or not own.started)
        else ""
    )
    return f"the GPU took no new CUDA client within {timeout_s:.0f} s of the last arm's servers stopping ({last.said}){how}; then --resume"


def _until(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.25)
    return True
