"""What a recording runs with: versions, GPUs, MPS, the environment (the settings parsed from a
`vllm serve` command line are dbo_trace/serve_args.py's, which the report and compare read too)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
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
