"""`dbo-trace record`: run a program under the plugin, drive a load and a profile window, write a bundle.

Orchestration only: the child process (child.py), the load (loadgen.py),
versions and settings (environment.py) and redaction (redact.py) live
beside it. Whatever happens (Ctrl-C, SIGTERM, a server that dies or hangs)
the bundle's manifest says what was collected and no child is left alive.

One recording's steps are public, and `record` and the sweep (sweep.py) both run them:
command_as_run, initial_manifest, prepare_launch, start_servers, bring_up, record_load (the timed
repeats, run_timed_repeats, then the profiled window, run_profiled_window), stop_servers and
finish_bundle, under terminations_interrupt, each wind-up shielded.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import signal
import socket
import threading
import time
import urllib.parse
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, NoReturn, Protocol

from dbo_trace import bundle as fmt
from dbo_trace import serve_args
from dbo_trace.errors import shown
from dbo_trace.record import environment
from dbo_trace.record.child import Child, ChildFailed, http, wait_healthy
from dbo_trace.record.bench import RepeatPlan, timed_repeats, tokenizer_of, vllm_executable
from dbo_trace.record.loadgen import LoadResult, LoadSpec, run_load, served_model
from dbo_trace.record.peer import Nudge, Peer, PeerPlan, afd_config, gpu_sharing, recheck_mps, role_of
from dbo_trace.record.plugin import ENV_DIR
from dbo_trace.record.pystacks import DEFAULT_RATE_HZ, PythonSampler
from dbo_trace.redact import Redactor, redact_argv

ENV_TRACES = "DBO_TRACE_TRACES"  # where a program (not a server) should write its profiler traces
PLUGIN_NAME = "dbo_trace"
STATUS_RECORDING, STATUS_COMPLETE, STATUS_INCOMPLETE, STATUS_FAILED = "recording", "complete", "incomplete", "failed"
STATUS_NO_TRACES = "no_traces"  # ran to its end, but no trace was written: nothing for `report` to read


@dataclass(frozen=True)
class ProfileWindow:
    """How vLLM's profiler brackets the load (its --profiler-config fields)."""

    delay_iterations: int = 0  # engine steps to skip after /start_profile
    max_iterations: int = 0  # engine steps to profile; 0 = until /stop_profile
    with_stack: bool = False  # Python stacks cost time and size; off unless asked


@dataclass(frozen=True)
class RecordPlan:
    command: list[str]
    out: Path
    server: bool
    base_url: str = "http://127.0.0.1:8000"
    load: LoadSpec = LoadSpec()
    warmup_prompts: int = 8
    window: ProfileWindow = ProfileWindow()
    startup_timeout_s: float = 1200.0
    grace_s: float = 30.0
    trace_timeout_s: float = 300.0
    repeats: int = 0  # timed unprofiled repeats of the load before the profiled window (bench.py)
    peer: PeerPlan | None = None  # a server started beside this one (the AFD FFN server: peer.py)
    python_samples: bool = True  # py-spy over the profiled load (pystacks.py)
    python_sample_rate: int = DEFAULT_RATE_HZ
    builtin_repeats: bool = False  # time the repeats with the built-in load even where `vllm bench serve` is there


class Progress(Protocol):
    def phase(self, text: str) -> None: ...
    def note(self, text: str) -> None: ...
    def counter(self, label: str, total: int) -> ContextManager[Callable[[int], None]]: ...


@dataclass
class Outcome:
    bundle: Path
    status: str
    reason: str | None
    manifest: dict = field(default_factory=dict)


class Interrupted(Exception):
    """SIGTERM, SIGHUP or SIGQUIT arrived; handled like Ctrl-C."""


class Refused(Exception):
    """The recording cannot start (the port is taken, the folder is another recording's); nothing was started."""


# -- the command as run -------------------------------------------------------------
def profiler_config(traces_dir: Path, window: ProfileWindow, user_json: str | None = None) -> dict:
    """vLLM's --profiler-config: the user's own fields kept, the torch profiler pointed into the bundle."""
    config = serve_args.json_value(user_json) if user_json else {}
    if not isinstance(config, dict):
        raise ValueError(user_json)
    config.update(
        profiler="torch",
        torch_profiler_dir=str(traces_dir.resolve()),
        ignore_frontend=True,  # the API server's CPU-only trace is not a rank
        torch_profiler_with_stack=config.get("torch_profiler_with_stack", window.with_stack),
    )
    if window.delay_iterations:
        config["delay_iterations"] = window.delay_iterations
    if window.max_iterations:
        config["max_iterations"] = window.max_iterations
    return config


def prepared_command(argv: list[str], traces_dir: Path, window: ProfileWindow) -> list[str]:
    """A `vllm serve` command with --profiler-config set (merged with the user's JSON one, if any)."""
    out: list[str] = []
    user_json = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--profiler-config" and i + 1 < len(argv):
            user_json, i = argv[i + 1], i + 2
            continue
        if arg.startswith("--profiler-config="):
            user_json, i = arg.split("=", 1)[1], i + 1
            continue
        out.append(arg)
        i += 1
    try:
        config = profiler_config(traces_dir, window, user_json)
    except ValueError:
        raise ChildFailed(f"--profiler-config {shown(user_json, 60)}: not a JSON object; dbo-trace merges its settings into one") from None
    return out + ["--profiler-config", json.dumps(config, separators=(",", ":"))]


def child_env(out: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a recorded process runs in (os.environ, or base): the plugin told to write into
    `out`, a program told where its traces go, dbo_trace added to an explicit VLLM_PLUGINS list."""
    env = dict(os.environ if base is None else base)
    env[ENV_DIR] = str(out.resolve())
    env[ENV_TRACES] = str((out / fmt.TRACES_DIR).resolve())
    plugins = env.get("VLLM_PLUGINS")
    if plugins is not None and PLUGIN_NAME not in plugins.split(","):
        env["VLLM_PLUGINS"] = ",".join(p for p in (plugins, PLUGIN_NAME) if p)
    return env


# -- the bundle ---------------------------------------------------------------------------
def now() -> str:
    """This moment in UTC, to the second: the manifest's and sweep.json's times."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _counters(out: Path) -> dict:
    """Every process's counters, summed (a file half-written at this moment is skipped this time)."""
    merged: dict[str, int] = {}
    # read_counters keeps of a body's counters only a dict of finite numbers ("many", null, NaN and
    # 1e999 from a broken writer are left out there).
    for _path, body, _age in fmt.read_counters(out):
        for key, value in body["counters"].items():
            merged[key] = merged.get(key, 0) + int(value)
    return merged


def initial_manifest(plan: RecordPlan, argv_run: list[str]) -> dict:
    """The manifest as a recording starts (status "recording"): the plan, the command as run (argv_run,
    command_as_run's), this host's versions, GPUs and settings, the start time."""
    return {
        "created_by": "dbo-trace record",
        "status": STATUS_RECORDING,
        "mode": "server" if plan.server else "program",
        "command": redact_argv(argv_run),
        "user_command": redact_argv(plan.command),
        "host": platform.node(),
        "versions": environment.versions(),
        "gpus": environment.gpus(),
        "env": environment.captured_env(),
        "settings": serve_args.serve_settings(plan.command) if plan.server else {},
        "hooks": True,
        "profile_all_threads": "requested",
        "afd": afd_config(plan.command) if plan.server else None,
        "load": asdict(plan.load) if plan.server else None,
        "warmup_prompts": plan.warmup_prompts if plan.server else None,
        "window": asdict(plan.window) if plan.server else None,
        "times": {"started": now()},
    }


def _no_traces_reason(plan: RecordPlan, manifest: dict) -> str:
    traces = plan.out / fmt.TRACES_DIR
    if plan.server:
        return (
            f"the server wrote no trace into {traces} (POST /stop_profile answered {manifest.get('stop_profile_status')}): "
            "does it run vLLM's torch profiler? nothing here for `dbo-trace report`; see docs/recording.md"
        )
    return (
        f"the program wrote no traces: a program records its own, with torch.profiler, into the folder "
        f"${ENV_TRACES} names ({traces}); see docs/recording.md"
    )


def _finish_manifest(out: Path, manifest: dict, redactor: Redactor, no_traces_reason: str | None = None) -> dict:
    """The files collected, and the final manifest written. A run that ended well but left no trace
    is not complete: it says so (STATUS_NO_TRACES) and why."""
    manifest["times"]["ended"] = now()
    traces_dir = out / fmt.TRACES_DIR
    manifest["traces"] = [str(p.relative_to(out)) for p in (fmt.trace_files(traces_dir) if traces_dir.is_dir() else [])]
    manifest["events"] = [str(p.relative_to(out)) for p in fmt.event_files(out)]
    manifest["counters"] = _counters(out)
    if "roles" in manifest:  # a peer ran beside the server: each role's traces, for the analysis
        peer_traces = out / PEER_TRACES
        for role, body in manifest["roles"].items():
            folder = peer_traces if body.get("peer") else traces_dir
            body["traces"] = [str(p.relative_to(out)) for p in (fmt.trace_files(folder) if folder.is_dir() else [])]
        peer_events = out / "peer"
        manifest["peer_events"] = [str(p.relative_to(out)) for p in fmt.event_files(peer_events)]
        manifest["peer_counters"] = _counters(peer_events)
    if manifest["status"] == STATUS_COMPLETE and not manifest["traces"]:
        manifest["status"], manifest["reason"] = STATUS_NO_TRACES, no_traces_reason or "no trace was written"
    fmt.write_manifest(out, redactor.json(manifest))
    return manifest


def _write_minimal_manifest(out: Path, manifest: dict, redactor: Redactor) -> None:
    """The smallest final manifest (status, reason, times); if even that cannot be written, the
    terminal says so (record's error line) and the manifest on disk is the one written at start."""
    keep = ("created_by", "status", "reason", "mode", "command", "times", "exit_status")
    try:
        fmt.write_manifest(out, redactor.json({k: manifest.get(k) for k in keep}))
    except Exception:
        manifest["reason"] = f"{manifest['reason']}; the manifest on disk still says {STATUS_RECORDING!r}"


PEER_TRACES = "peer/traces"
COUNTERS_SERIES = "counters-series.jsonl"
SERIES_EVERY_S = 1.0


class CounterSeries:
    """The plugin's counters (summed over processes) once a second while the program runs, so a
    recording keeps how they moved (steps/s, microbatched share over time), not only their end."""

    def __init__(self, out: Path):
        self.path = out / COUNTERS_SERIES
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="dbo-trace-counters")
        self._t0 = time.monotonic()
        self._lines = 0

    def start(self) -> None:
        self._thread.start()

    def _sample(self) -> None:
        counters = _counters(self.path.parent)
        if not counters and not self._lines:
            return  # nothing yet: the series starts with the first counters
        line = json.dumps({"t_s": round(time.monotonic() - self._t0, 3), "counters": counters}, sort_keys=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        self._lines += 1

    def _run(self) -> None:
        while not self._stop.wait(SERIES_EVERY_S):
            try:
                self._sample()
            except OSError:
                return

    def stop(self) -> str | None:
        """Stop sampling (one last sample); the file's name in the bundle, or None if nothing was counted."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        try:
            self._sample()
        except OSError:
            pass
        return COUNTERS_SERIES if self._lines else None


# -- signals ------------------------------------------------------------------------------
@contextmanager
def _signals(handler, *signums: signal.Signals) -> Iterator[None]:
    """Handle signums with handler for the block (only the main thread may set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signums}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _raise_interrupted(signum, frame) -> NoReturn:
    raise Interrupted(signal.Signals(signum).name)


# SIGTERM, SIGHUP and SIGQUIT end a recording like Ctrl-C does (SIGQUIT's default, a core dump,
# would leave the server's group running and the manifest at "recording").
_TERMINATIONS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
def terminations_interrupt() -> ContextManager[None]:
    """For the block, SIGTERM, SIGHUP and SIGQUIT raise Interrupted, as Ctrl-C raises KeyboardInterrupt
    (in the main thread; elsewhere nothing changes). The caller winds up on either."""
    return _signals(_raise_interrupted, *_TERMINATIONS)


def shielded() -> ContextManager[None]:
    """For the block, Ctrl-C and the terminations are ignored (main thread): wrap what stops the servers
    and writes the final manifest, so that a second Ctrl-C or SIGTERM cannot leave a server running."""
    return _signals(signal.SIG_IGN, signal.SIGINT, *_TERMINATIONS)


# -- before anything starts ---------------------------------------------------------------
def _host_port(base_url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(base_url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.hostname or "127.0.0.1", port or (443 if parts.scheme == "https" else 80)


def refuse_busy_port(base_url: str) -> None:
    """Refused if something already answers at the server's address: its /health would be taken for
    the server's, and its model recorded."""
    host, port = _host_port(base_url)
    try:
        with socket.create_connection((host, port), timeout=2.0):
            pass
    except OSError:
        return  # refused, unreachable or unresolvable: nothing answers there now
    raise Refused(
        f"{host}:{port} is already in use: another process answers there before the server has started "
        f"(another vLLM?); stop it, or give the server another --port (and --url if dbo-trace cannot read it from the command)"
    )


def claim_folder(out: Path) -> None:
    """Make `out` this recording's, atomically: created if new (an existing folder must be empty), and
    its manifest created exclusively, so that a second `record` into the same folder at the same
    moment is refused instead of writing beside the first."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.mkdir()
    except FileExistsError:
        if not out.is_dir():
            raise Refused(f"{out}: exists and is not a folder; choose another --out") from None
    except OSError as exc:
        raise Refused(f"{out}: cannot create the folder ({exc.strerror}); choose another --out") from None
    manifest = out / fmt.MANIFEST_NAME
    try:
        os.close(os.open(manifest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        raise Refused(f"{out}: another recording is writing there; choose another --out (nothing there was changed)") from None
    except OSError as exc:
        raise Refused(f"{out}: cannot write there ({exc.strerror}); choose another --out") from None
    if os.listdir(out) != [fmt.MANIFEST_NAME]:  # filled between the caller's check and the claim
        os.unlink(manifest)
        raise Refused(f"{out}: already exists and is not empty; choose another --out (nothing there was changed)")


def pair_manifest(plan: RecordPlan, manifest: dict, argv: list[str], env: dict[str, str], peer: Peer) -> None:
    """The manifest's roles, peer and gpu_sharing, for a server recorded beside its peer."""
    main_role = role_of(plan.command, "main")
    if peer.role == main_role:  # both commands name one role: the manifest must still tell them apart
        peer.role = f"{peer.role}-peer"
    manifest["roles"] = {
        main_role: {"peer": False, "command": argv, "settings": manifest["settings"]},
        peer.role: {"peer": True, "command": peer.argv, "settings": serve_args.serve_settings(peer.plan.command)},
    }
    manifest["peer"] = peer.manifest(plan.out)
    manifest["gpu_sharing"] = gpu_sharing(env, peer)


def start_peer(plan: RecordPlan, manifest: dict, peer: Peer, ui: Progress) -> None:
    """The peer started and listening (the main server connects to it at start-up)."""
    peer.start()
    ui.phase(f"waiting for the {peer.role} server to listen on port {peer.port} (output in peer/server.log)")
    manifest["peer"]["pid"] = peer.child.pid if peer.child else None
    manifest["times"]["peer_ready_after_s"] = round(peer.wait_ready(plan.startup_timeout_s), 1)


@dataclass
class Launch:
    """What a recording's servers start with: the command as run, its environment, the peer (an AFD
    pair's FFN server, not started yet) and the one redactor every text to the manifest or the
    terminal goes through, which knows this run's secret values (a key echoed in a log is caught too)."""

    argv: list[str]
    env: dict[str, str]
    peer: Peer | None
    redactor: Redactor


def command_as_run(plan: RecordPlan) -> list[str]:
    """The command run: a server's with its profiler pointed into plan.out (prepared_command), a
    program's as given. ChildFailed where the user's --profiler-config is not JSON."""
    return prepared_command(plan.command, plan.out / fmt.TRACES_DIR, plan.window) if plan.server else list(plan.command)


def prepare_launch(plan: RecordPlan, argv: list[str]) -> Launch:
    """The Launch for plan, argv being command_as_run(plan): nothing is started or written. The peer's
    command is prepared here, so that a bad one is refused before anything is made."""
    env = child_env(plan.out)
    peer = None
    if plan.server and plan.peer is not None:
        window = ProfileWindow(with_stack=plan.window.with_stack)  # the peer runs no engine steps: its window is ours
        peer = Peer(plan.peer, plan.out, env, lambda command, traces: prepared_command(command, traces, window))
    redactor = Redactor(env, list(plan.command) + argv + (list(peer.plan.command) + peer.argv if peer else []))
    return Launch(argv, env, peer, redactor)


def start_servers(plan: RecordPlan, manifest: dict, launch: Launch, ui: Progress, log: Path) -> Child:
    """The peer started and listening (if any: start_peer), then the server (or program) started in its
    own process group, its output into log; its pid in the manifest (pair_manifest has run for a pair).
    ChildFailed where one does not start (the peer not listening in time); the caller stops what
    started (stop_servers)."""
    if launch.peer is not None:
        start_peer(plan, manifest, launch.peer, ui)
    child = Child(launch.argv, launch.env, log)
    manifest["pid"] = child.pid
    return child


# -- the recording --------------------------------------------------------------------------
def record(plan: RecordPlan, ui: Progress) -> Outcome:
    """Refused (nothing made) if the server's port is taken or the folder is not this run's to fill;
    otherwise the bundle, whose manifest ends in a final status whatever happens (an internal error
    is re-raised once the manifest says "failed" and the child is stopped)."""
    out = plan.out
    argv = command_as_run(plan)
    if plan.server:
        refuse_busy_port(plan.base_url)
    manifest = initial_manifest(plan, argv)
    launch = prepare_launch(plan, argv)  # made before the folder: a bad peer command makes nothing
    peer, redactor = launch.peer, launch.redactor
    claim_folder(out)
    fmt.write_manifest(out, redactor.json(manifest))  # a bundle exists from the first moment
    (out / fmt.TRACES_DIR).mkdir()
    (out / fmt.EVENTS_DIR).mkdir()
    log_name = "server.log" if plan.server else "program.log"
    manifest["log"] = log_name
    # Failed until the work has ended one way or another: whatever escapes below leaves a true status.
    status, child = STATUS_FAILED, None
    reason: str | None = "dbo-trace record stopped before the recording ended"
    series = CounterSeries(out)
    if peer is not None:
        pair_manifest(plan, manifest, argv, launch.env, peer)
    try:
        with terminations_interrupt():
            child = start_servers(plan, manifest, launch, ui, out / log_name)
            series.start()
            if plan.server:
                model = bring_up(plan, child, manifest, ui, peer)
                record_load(plan, child, model, manifest, ui, peer)
                status, reason = STATUS_COMPLETE, None
            else:
                code = _wait_program(child, ui)
                manifest["exit_status"] = code
                status, reason = (
                    (STATUS_COMPLETE, None)
                    if code == 0
                    else (STATUS_FAILED, f"the program exited with status {code}; its last lines:\n{child.tail()}")
                )
    except (KeyboardInterrupt, Interrupted) as exc:
        status, reason = STATUS_INCOMPLETE, f"interrupted ({exc or 'SIGINT'}); the bundle holds what was collected"
    except ChildFailed as exc:
        status, reason = STATUS_FAILED, str(exc)
    except Exception as exc:  # a bug: the manifest says so, the child is stopped, then the CLI's one line
        status, reason = STATUS_FAILED, f"dbo-trace record failed: {type(exc).__name__}: {exc}"
        raise
    finally:
        with shielded():
            status, reason = _wind_up(plan, child, manifest, series, redactor, ui, status, reason, peer)
    if not manifest.get("events") and status == STATUS_COMPLETE:
        ui.note(
            "no event log was written: no DBO class ran in the program, or the plugin did not load there "
            "(is dbo-trace installed in its Python? see `dbo-trace doctor`)"
        )
    return Outcome(out, status, reason, manifest)


def _wind_up(plan, child, manifest, series, redactor, ui, status: str, reason: str | None, peer: Peer | None = None) -> tuple[str, str | None]:
    """Close the profile window, stop the child, write the final manifest: each step guarded, so that
    a failing one (a server that answers nonsense, a full disk, a bug) still leaves the child stopped
    and the manifest final. Returns the final (status, reason)."""
    status, reason = stop_servers(plan, child, manifest, ui, status, reason, peer)
    return finish_bundle(plan.out, manifest, redactor, status, reason, series.stop(), _no_traces_reason(plan, manifest))


def finish_bundle(
    out: Path, manifest: dict, redactor: Redactor, status: str, reason: str | None, counters_series: Any, no_traces: str
) -> tuple[str, str | None]:
    """A bundle's final manifest, its servers stopped (record's, and each load of a sweep): its status
    and redacted reason, no window open, the counters' series; guarded, so that a failed write (a full
    disk) still leaves a final manifest. no_traces: the reason where the window wrote no trace.
    Returns the final (status, reason)."""
    reason = redactor.text(reason) if reason else reason
    manifest["status"], manifest["reason"] = status, reason
    manifest.pop("profiling", None)
    manifest["counters_series"] = counters_series
    manifest.setdefault("traces", [])
    manifest.setdefault("events", [])
    try:
        _finish_manifest(out, manifest, redactor, no_traces)
        return manifest["status"], manifest["reason"]
    except Exception as exc:  # a full disk, say: the manifest must still end in a final state
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
        status, reason = STATUS_FAILED, f"could not write the manifest ({why}); {reason or ''}".rstrip("; ")
        manifest["status"], manifest["reason"] = status, reason
        _write_minimal_manifest(out, manifest, redactor)
        return status, reason


def stop_servers(
    plan: RecordPlan, child: Child | None, manifest: dict, ui: Progress, status: str, reason: str | None, peer: Peer | None = None
) -> tuple[str, str | None]:
    """Close an open profile window (the peer's, then the server's), stop the server, then its peer:
    each step guarded. Returns (status, reason), a failing step added to them."""
    if peer is not None and peer.child is not None and peer.child.poll() is None and peer.last_sent == "start":
        try:  # interrupted inside the window: stop the peer's profiler while the main server can still nudge its loop
            alive = child is not None and child.poll() is None and plan.server
            model = manifest.get("model")
            nudge = Nudge(plan.base_url, model, min(plan.trace_timeout_s, 60.0)) if alive and isinstance(model, str) else None
            _stop_peer_profile(plan, peer, manifest, ui, nudge, min(plan.trace_timeout_s, 60.0))
        except Exception as exc:
            failure = f"stopping the {peer.role} server's profiler failed ({type(exc).__name__}: {exc})"
            status, reason = STATUS_FAILED, f"{reason}; {failure}" if reason else failure
    if child is not None:
        try:
            if manifest.get("profiling") and child.poll() is None:  # close the window: the server writes its traces
                ui.phase("stopping the profiler")
                _stop_profile(plan, manifest, timeout_s=min(plan.trace_timeout_s, 60.0))
        except Exception as exc:
            failure = f"closing the profile window failed ({type(exc).__name__}: {exc})"
            status, reason = STATUS_FAILED, f"{reason}; {failure}" if reason else failure
        if child.poll() is None or child.group_alive() or child.escaped():
            ui.phase("stopping the server" if plan.server else "stopping the program")
            stopped = child.stop(plan.grace_s, on_signal=lambda s: ui.note(f"sent {s} to the process group"))
            manifest["stop"] = {
                "signals": stopped.signals_sent,
                "exit_status": stopped.returncode,
                "outside_group": stopped.outside_group,
                "survivors": stopped.survivors,
            }
            if stopped.outside_group:
                ui.note(f"stopped {len(stopped.outside_group)} process(es) that had left the group (setsid)")
            if stopped.survivors:
                ui.note(f"still running after SIGKILL: pids {stopped.survivors}")
        manifest["exit_status"] = child.poll()
    if peer is not None and peer.child is not None:  # after the main server: it holds the peer's connection
        try:
            died = peer.child.poll()
            if died is not None and status == STATUS_COMPLETE:  # it ended before we stopped it: its role is missing
                status, reason = STATUS_FAILED, _peer_died(peer, died)
            if peer.child.poll() is None or peer.child.group_alive() or peer.child.escaped():
                ui.phase(f"stopping the {peer.role} server")
                stopped = peer.child.stop(plan.grace_s, on_signal=lambda s: ui.note(f"sent {s} to the {peer.role} server's group"))
                manifest["peer"]["stop"] = {"signals": stopped.signals_sent, "exit_status": stopped.returncode, "survivors": stopped.survivors}
            manifest["peer"]["exit_status"] = peer.child.poll()
        except Exception as exc:
            failure = f"stopping the {peer.role} server failed ({type(exc).__name__}: {exc})"
            status, reason = STATUS_FAILED, f"{reason}; {failure}" if reason else failure
    return status, reason


def _peer_died(peer: Peer, code: int) -> str:
    assert peer.child is not None
    return f"the {peer.role} server exited with status {code} during the recording; its last lines:\n{peer.child.tail()}"


def _check_peer(peer: Peer | None) -> None:
    """The main server of an AFD pair waits forever on a peer that died: end the phase at once."""
    if peer is not None and peer.child is not None and (code := peer.child.poll()) is not None:
        raise ChildFailed(_peer_died(peer, code))


def _wait_program(child: Child, ui: Progress) -> int:
    """Until the program exits; what it left running in its group is stopped by record() like a server."""
    ui.phase(f"running {Path(child.argv[0]).name} (output in {child.log_path.name})")
    while (code := child.poll()) is None:
        time.sleep(0.2)
    return code


def bring_up(plan: RecordPlan, child: Child, manifest: dict, ui: Progress, peer: Peer | None = None) -> str:
    """Until the server answers, is ours and is warmed up; the model it serves."""
    ui.phase(f"waiting for the server at {plan.base_url}/health")
    healthy = wait_healthy(child, plan.base_url, plan.startup_timeout_s, tick=lambda _waited: _check_peer(peer))
    manifest["times"]["healthy_after_s"] = round(healthy, 1)
    host, port = _host_port(plan.base_url)
    ours = child.listens_on(port)
    if ours is False:
        raise ChildFailed(
            f"{plan.base_url}/health was answered by a process outside the server's process tree (something else "
            f"listens on port {port}); stop it, or give the server another --port"
        )
    manifest["listener_verified"] = ours  # True: the port's listener is the server or its descendant; null: not checked
    model = served_model(plan.base_url)
    if model is None:
        raise ChildFailed(f"{plan.base_url}/v1/models named no model; is this an OpenAI-compatible server?")
    manifest["model"] = model
    if peer is not None:
        recheck_mps(manifest, child, peer)
    if plan.warmup_prompts:
        warm = LoadSpec(**{**asdict(plan.load), "num_prompts": plan.warmup_prompts, "seed": plan.load.seed + 1})
        manifest["warmup"] = _load_phase(plan, child, model, warm, "warm-up", ui, peer).as_dict()
    return model


def record_load(
    plan: RecordPlan, child: Child, model: str, manifest: dict, ui: Progress, peer: Peer | None = None, profile: bool = True
) -> None:
    """One load (plan.load) on servers that are up and warm (bring_up's model): the timed repeats
    (plan.repeats of them, profiler off), then, where profile, the profiled window, its server's Python
    sampled where plan.python_samples. The results go into manifest; ChildFailed where a server dies
    or no request succeeds. `record` runs one; a sweep one per load of an arm's servers."""
    if plan.repeats:
        run_timed_repeats(plan, child, model, manifest, ui, peer)
    if not profile:
        return
    sampler = PythonSampler(plan.out, plan.python_sample_rate) if plan.python_samples else None
    if sampler is not None:
        for role, pid in [(role_of(plan.command, "main"), child.pid), *([(peer.role, peer.child.pid)] if peer and peer.child else [])]:
            note = sampler.start(role, pid)
            if note:
                ui.note(f"Python samples of the {role} server: {note}; the recording goes on without them")

    def stop_sampling() -> None:  # at the load's end: the traces' export that follows is not the run's time
        if sampler is not None and "pystacks" not in manifest:
            manifest["pystacks"] = sampler.stop()

    try:
        run_profiled_window(plan, child, model, manifest, ui, peer, stop_sampling)
    finally:
        stop_sampling()


def run_timed_repeats(plan: RecordPlan, child: Child, model: str, manifest: dict, ui: Progress, peer: Peer | None = None) -> None:
    """plan.repeats timed runs of plan.load, profiler off (bench.py: `vllm bench serve`, or the built-in
    load), on servers that are up; their results and note into manifest. ChildFailed where one dies."""
    repeat = RepeatPlan(
        repeats=plan.repeats,
        base_url=plan.base_url,
        model=model,
        tokenizer=tokenizer_of(plan.command),
        vllm=None if plan.builtin_repeats else vllm_executable(plan.command),
        load=plan.load,
    )
    tool = "vllm bench serve" if repeat.vllm else "the built-in load"
    ui.phase(f"timed repeats, profiler off: {plan.repeats} x {plan.load.num_prompts} requests with {tool}")

    def done(entry: dict) -> None:
        ui.note(
            f"repeat {entry['index'] + 1}/{plan.repeats} ({entry['tool']}): {entry.get('duration_s')} s, "
            f"{entry.get('output_throughput')} output tokens/s, median TPOT {entry.get('median_tpot_ms')} ms"
        )
        check()

    def check() -> None:
        if child.poll() is not None:
            raise ChildFailed(f"the server exited with status {child.poll()} during the timed repeats; its last lines:\n{child.tail()}")
        _check_peer(peer)

    def gone() -> bool:  # a dead server (or peer) ends the repeat at once instead of at the request timeout
        return child.poll() is not None or (peer is not None and not peer.alive())

    repeats, note = timed_repeats(repeat, plan.out, done, abort=gone)
    check()
    manifest["repeats"] = repeats
    manifest["repeats_note"] = note
    if note:
        ui.note(note)


def run_profiled_window(
    plan: RecordPlan, child: Child, model: str, manifest: dict, ui: Progress, peer: Peer | None, after_load: Callable[[], None]
) -> None:
    """The profiler started (the peer's first), plan.load driven, after_load called, the profiler stopped
    and the traces waited for (the server's, then the peer's) into plan.out. ChildFailed where the
    server refuses the profiler, dies, or answers no request; an open window is closed by stop_servers."""
    nudge = Nudge(plan.base_url, model, plan.trace_timeout_s)
    if peer is not None:
        # A peer that runs its own loop (the FFN) takes the start at its next iteration: a small request
        # makes one, so that its profiler runs before the main server's window opens.
        ui.phase(f"starting the {peer.role} server's profiler (through its command file)")
        started = peer.profile("start", timeout_s=120.0, nudge=nudge)
        nudge.wait()  # its steps end before the window opens
        manifest["peer"]["profile_start"] = started
        if not started["ok"]:
            ui.note(f"the {peer.role} server's profiler did not confirm its start: {started['acks'] or 'no answer'}")
    status, body = http("POST", f"{plan.base_url}/start_profile", timeout=60.0)
    if status != 200:
        raise ChildFailed(
            f"the server refused POST /start_profile (HTTP {status}): {body[:200]!r}; "
            "does it run vLLM's torch profiler (--profiler-config)?"
        )
    manifest["profiling"] = True
    manifest["times"]["profile_started"] = now()
    result = _load_phase(plan, child, model, plan.load, "profiled load", ui, peer)
    manifest["load_result"] = result.as_dict()
    after_load()
    ui.phase("stopping the profiler (the server writes its traces now)")
    _stop_profile(plan, manifest, timeout_s=plan.trace_timeout_s, alive=lambda: child.poll() is None)
    if child.poll() is not None:  # it died as the load ended, after the load's own check: no trace is coming
        raise ChildFailed(f"the server exited with status {child.poll()} during the profiled load; its last lines:\n{child.tail()}")
    if peer is not None:
        _stop_peer_profile(plan, peer, manifest, ui, nudge, plan.trace_timeout_s)
    if result.completed == 0:
        raise ChildFailed(f"no request of the load succeeded ({result.first_error}); the server's last lines:\n{child.tail()}")


def _stop_peer_profile(plan: RecordPlan, peer: Peer, manifest: dict, ui: Progress, nudge: Nudge | None, timeout_s: float) -> None:
    """Stop the peer's profiler and wait for its traces. A peer whose loop holds the stop runs it at its
    next iteration: `nudge` sends one small request at a time through the main server until it ran."""
    ui.phase(f"stopping the {peer.role} server's profiler (it writes its traces now)")
    stopped = peer.profile("stop", timeout_s=timeout_s, nudge=nudge)
    manifest["peer"]["profile_stop"] = stopped
    if nudge is not None and nudge.sent:
        manifest["peer"]["nudge_requests"] = nudge.sent
    manifest["peer"]["traces_settled"] = _wait_for_traces(peer.traces, min(timeout_s, 60.0) if stopped["ok"] else 5.0)


def _load_phase(
    plan: RecordPlan, child: Child, model: str, spec: LoadSpec, label: str, ui: Progress, peer: Peer | None = None
) -> LoadResult:
    stop = threading.Event()

    def watch() -> None:  # a server (or its peer) that dies mid-load ends the load at once
        while not stop.wait(0.5):
            if child.poll() is not None or (peer is not None and not peer.alive()):
                stop.set()

    threading.Thread(target=watch, daemon=True).start()
    with ui.counter(f"{label}: {spec.num_prompts} requests", spec.num_prompts) as advance:
        result = run_load(plan.base_url, model, spec, on_done=lambda r: advance(r.sent), stop=stop)
    stop.set()
    if child.poll() is not None:
        raise ChildFailed(f"the server exited with status {child.poll()} during the {label}; its last lines:\n{child.tail()}")
    _check_peer(peer)
    return result


def _stop_profile(plan: RecordPlan, manifest: dict, timeout_s: float, alive: Callable[[], bool] | None = None) -> None:
    status, _ = http("POST", f"{plan.base_url}/stop_profile", timeout=timeout_s)
    manifest["profiling"] = False
    manifest["times"]["profile_stopped"] = now()
    manifest["stop_profile_status"] = status
    manifest["traces_settled"] = _wait_for_traces(plan.out / fmt.TRACES_DIR, timeout_s, alive=alive)


def _wait_for_traces(folder: Path, timeout_s: float, quiet_s: float = 2.0, alive: Callable[[], bool] | None = None) -> bool:
    """True once at least one trace exists and no file has grown for quiet_s. alive: whether the
    server that writes them still runs; once it has exited no trace is coming: False at once."""
    deadline = time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            return False
        sizes = tuple(sorted((p.name, p.stat().st_size) for p in folder.iterdir() if p.is_file())) if folder.is_dir() else ()
        if sizes != last:
            last, since = sizes, time.monotonic()
        elif sizes and time.monotonic() - since >= quiet_s:
            return True
        time.sleep(0.25)
    return False
