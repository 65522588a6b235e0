"""`dbo-trace sweep`: arms x loads, each arm's server (and AFD peer) started once, one bundle per arm and load.

For each arm: the servers start with the arm's flags (added to both commands of an AFD pair), warm up,
then for each load the timed repeats (profiler off) and, unless profiling is off, one profiled window
at that load; the window's trace files are moved out of the server's profiler folder into the load's
bundle. The folder's layout and sweep.json are in docs/bundle-format.md ("A sweep"); the recorder's
public steps (recorder.py: prepare_launch, start_servers, bring_up, record_load, stop_servers,
finish_bundle) do the work, so that a sweep's bundle is what `record` writes for that load.

sweep.json is replaced atomically after every run: a sweep killed at any moment leaves a true state,
and `--resume` runs what is not complete.
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, ContextManager, Iterator

from dbo_trace import bundle as fmt
from dbo_trace.files import replace_file
from dbo_trace.record import recorder as rec
from dbo_trace.record.bench import BENCH_DIR
from dbo_trace.record.child import Child, ChildFailed
from dbo_trace.record.environment import OwnMps, wait_ready
from dbo_trace.record.loadgen import LoadSpec
from dbo_trace.record.peer import PEER_DIR, Peer, PeerPlan
from dbo_trace.redact import Redactor, redact_argv
from dbo_trace.sweep_folder import SWEEP_FORMAT, SWEEP_NAME, SWEEP_VERSION, NotASweep, SweepError, read_sweep_document

LOCK_NAME = ".sweep.lock"
PREVIOUS_DIR = "previous"  # an arm's earlier lifetimes and unfinished loads, set aside on --resume
RUN_COMPLETE, RUN_FAILED, RUN_INCOMPLETE, RUN_SKIPPED, RUN_PENDING = "complete", "failed", "incomplete", "skipped", "pending"
# What must match for a sweep folder to be resumed or extended (arms may be added; an arm's flags may not change).
PLAN_KEYS = ("command", "peer_command", "loads", "repeats", "profile", "repeat_tool")


@dataclass(frozen=True)
class Arm:
    name: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class SweepLoad:
    name: str  # "c16": the folder's name
    spec: LoadSpec

    def as_dict(self) -> dict:
        s = self.spec
        return {"name": self.name, "concurrency": s.concurrency, "num_prompts": s.num_prompts, "input_len": s.input_len, "output_len": s.output_len}


def load_name(concurrency: int) -> str:
    return f"c{concurrency}"


@dataclass(frozen=True)
class SweepPlan:
    command: list[str]
    out: Path
    arms: list[Arm]
    loads: list[SweepLoad]
    repeats: int = 3
    profile: bool = True
    base_url: str = "http://127.0.0.1:8000"
    peer: PeerPlan | None = None
    window: rec.ProfileWindow = rec.ProfileWindow()
    warmup_prompts: int = 8
    startup_timeout_s: float = 1200.0
    grace_s: float = 30.0
    trace_timeout_s: float = 300.0
    builtin_repeats: bool = False  # the built-in load times the repeats (no `vllm bench serve` start-up per repeat)
    own_mps: bool = False  # run the sweep's own MPS control daemon, afresh for each arm (record/environment.py)

    def options(self) -> dict:
        """The rest of the plan, kept in sweep.json so that `--resume` alone runs the same sweep."""
        return {
            "base_url": self.base_url, "seed": self.loads[0].spec.seed if self.loads else 0,
            "warmup_prompts": self.warmup_prompts, "window": asdict(self.window),
            "peer_ready_port": self.peer.ready_port if self.peer else None,
            "startup_timeout_s": self.startup_timeout_s, "grace_s": self.grace_s, "trace_timeout_s": self.trace_timeout_s,
        }  # fmt: skip

    def identity(self) -> dict:
        """sweep.json's fields that a resumed sweep must share."""
        return {
            "command": redact_argv(self.command),
            "peer_command": redact_argv(self.peer.command) if self.peer else None,
            "loads": [load.as_dict() for load in self.loads],
            "repeats": self.repeats,
            "profile": self.profile,
            "repeat_tool": "builtin" if self.builtin_repeats else "auto",  # arms timed by different tools do not compare
        }


class SweepRefused(Exception):
    """The folder is not this sweep's to write (another folder's files, another plan, another sweep running)."""


@dataclass
class SweepOutcome:
    out: Path
    runs: list[dict]
    interrupted: bool = False
    failed_arms: list[str] = field(default_factory=list)


# -- sweep.json -------------------------------------------------------------------------------
def read_state(out: Path) -> dict | None:
    """sweep.json, or None where there is none; SweepRefused where it is not a sweep's. Read as the
    report reads it (sweep_folder.read_sweep_document: one read, bounded), its plan checked here."""
    path = out / SWEEP_NAME
    if not path.is_file():
        return None
    try:
        body: dict | None = read_sweep_document(out)
    except NotASweep:
        body = None
    except SweepError:
        raise SweepRefused(f"{path}: not readable as JSON; not a sweep folder this dbo-trace can resume") from None
    if body is None or body.get("format") != SWEEP_FORMAT or body.get("version") != SWEEP_VERSION:
        raise SweepRefused(f"{path}: not a {SWEEP_FORMAT} version {SWEEP_VERSION} document; choose another --out")
    problem = _state_problem(body)
    if problem:
        raise SweepRefused(f"{path}: {problem}; it was not written by this dbo-trace, or was edited: choose another --out")
    return body


def is_folder_name(name: object) -> bool:
    """An arm's or load's name is a folder's under OUT: letters, digits, '-', '_', '.', not hidden, not previous/."""
    return (
        isinstance(name, str) and 0 < len(name) <= 100 and all(c.isascii() and (c.isalnum() or c in "-_.") for c in name)
        and not name.startswith(".") and name != PREVIOUS_DIR
    )  # fmt: skip


def _state_problem(body: dict) -> str | None:
    """What makes a sweep.json unusable (a resume must never follow a bad name out of OUT, nor crash)."""
    def strings(value: object) -> bool:
        return isinstance(value, list) and all(isinstance(x, str) for x in value)

    arms, loads, runs = body.get("arms"), body.get("loads"), body.get("runs")
    if not isinstance(arms, list) or not all(isinstance(a, dict) and is_folder_name(a.get("name")) and strings(a.get("args")) for a in arms):
        return "its arms are not [{name, args}] with folder names"
    counts = ("concurrency", "num_prompts", "input_len", "output_len")
    if not isinstance(loads, list) or not all(
        isinstance(l, dict) and is_folder_name(l.get("name")) and all(type(l.get(k)) is int and 0 < l[k] <= 10_000_000 for k in counts)
        for l in loads
    ):
        return "its loads are not [{name, concurrency, num_prompts, input_len, output_len}]"
    statuses = (RUN_COMPLETE, RUN_FAILED, RUN_INCOMPLETE, RUN_SKIPPED, RUN_PENDING)
    if not isinstance(runs, list) or not all(
        isinstance(r, dict) and is_folder_name(r.get("arm")) and is_folder_name(r.get("load")) and r.get("status") in statuses
        for r in runs
    ):
        return "its runs are not [{arm, load, bundle, status, reason}]"
    if not strings(body.get("command")) or not (body.get("peer_command") is None or strings(body.get("peer_command"))):
        return "its command is not a list of strings"
    if type(body.get("repeats")) is not int or not isinstance(body.get("profile"), bool):
        return "its repeats or profile is malformed"
    return None


def merged_state(plan: SweepPlan, previous: dict | None) -> dict:
    """The sweep's state: a new one, or the previous one with this plan's new arms (and their runs) added.
    SweepRefused where the previous sweep's plan differs."""
    ident = plan.identity()
    if previous is None:
        state = {"format": SWEEP_FORMAT, "version": SWEEP_VERSION, "created": rec.now(), **ident, "arms": [], "runs": []}
        state["options"] = plan.options()
    else:
        state = previous
        for key in PLAN_KEYS:
            if state.get(key) != ident[key]:
                raise SweepRefused(
                    f"{plan.out}: holds a sweep with another {key} ({json.dumps(state.get(key))[:200]}); "
                    "resume it with the same arguments (or `dbo-trace sweep -o OUT --resume` alone), or choose another --out"
                )
    known = {arm["name"]: arm for arm in state["arms"]}
    for arm in plan.arms:
        args = redact_argv(list(arm.args))
        if arm.name in known and known[arm.name]["args"] != args:
            raise SweepRefused(
                f"{plan.out}: its arm {arm.name!r} ran with {known[arm.name]['args']}, not {args}; "
                "name the new arm differently, or choose another --out"
            )
        if arm.name not in known:
            state["arms"].append({"name": arm.name, "args": args})
    have = {(run["arm"], run["load"]) for run in state["runs"]}
    for arm in state["arms"]:
        for load in plan.loads:
            if (arm["name"], load.name) not in have:
                state["runs"].append(
                    {"arm": arm["name"], "load": load.name, "bundle": f"{arm['name']}/{load.name}", "status": RUN_PENDING, "reason": None}
                )
    return state


def write_state(out: Path, state: dict) -> None:
    state["updated"] = rec.now()
    replace_file(out / SWEEP_NAME, (json.dumps(state, indent=2) + "\n").encode())


def _run_of(state: dict, arm: str, load: str) -> dict:
    return next(run for run in state["runs"] if run["arm"] == arm and run["load"] == load)


# -- the folder -------------------------------------------------------------------------------
@contextmanager
def claimed(out: Path, resume: bool) -> Iterator[dict | None]:
    """The folder made this sweep's for the block (a lock another sweep into it is refused by), and its
    previous state. A folder that holds anything but a sweep is refused, untouched."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SweepRefused(f"{out}: cannot create the folder ({exc.strerror}); choose another --out") from None
    if not out.is_dir():
        raise SweepRefused(f"{out}: exists and is not a folder; choose another --out")
    previous = read_state(out)
    if previous is None and any(p.name != LOCK_NAME for p in out.iterdir()):
        raise SweepRefused(f"{out}: already exists, is not empty and holds no {SWEEP_NAME}; choose another --out (nothing there was changed)")
    if previous is not None and not resume:
        raise SweepRefused(f"{out}: holds a sweep already; add --resume to run what it lacks, or choose another --out")
    fd = os.open(out / LOCK_NAME, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise SweepRefused(f"{out}: another dbo-trace sweep is writing there; wait for it, or choose another --out") from None
        yield read_state(out)  # read again under the lock
    finally:
        os.close(fd)


def _set_aside(arm_dir: Path, keep: set[str]) -> Path | None:
    """An earlier lifetime's files (server.log, events, unfinished loads) moved under previous/N/:
    nothing a resumed sweep overwrites is lost. Returns the folder they went to."""
    if not arm_dir.is_dir():
        return None
    leftovers = [p for p in arm_dir.iterdir() if p.name not in keep and p.name != PREVIOUS_DIR]
    if not leftovers:
        return None
    n = 1
    while (arm_dir / PREVIOUS_DIR / str(n)).exists():
        n += 1
    dest = arm_dir / PREVIOUS_DIR / str(n)
    dest.mkdir(parents=True)
    for path in leftovers:
        path.rename(dest / path.name)
    return dest


def _move_files(src: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        for path in src.iterdir():
            if path.is_file():
                path.rename(dest / path.name)


def _copy_whole_lines(src: Path, dest: Path, suffixes: tuple[str, ...]) -> None:
    """The event logs and counters as they are now: a log still being appended to is cut at its last
    whole line (a reader must never see half a record)."""
    dest.mkdir(parents=True, exist_ok=True)
    if not src.is_dir():
        return
    for path in src.iterdir():
        if not path.is_file() or not path.name.endswith(suffixes):
            continue
        data = path.read_bytes()
        if path.name.endswith(".jsonl"):
            data = data[: data.rfind(b"\n") + 1]
        replace_file(dest / path.name, data)


def harvest(arm_dir: Path, load_dir: Path, peer: Peer | None) -> None:
    """This window's files into the load's bundle: the traces and the repeats' results moved (the next
    window starts from empty folders), the event logs and counters copied (their whole lifetime so far)."""
    _move_files(arm_dir / fmt.TRACES_DIR, load_dir / fmt.TRACES_DIR)
    _move_files(arm_dir / BENCH_DIR, load_dir / BENCH_DIR)
    suffixes = (".jsonl", ".counters.json")
    _copy_whole_lines(arm_dir / fmt.EVENTS_DIR, load_dir / fmt.EVENTS_DIR, suffixes)
    if peer is not None:
        _move_files(peer.traces, load_dir / PEER_DIR / "traces")
        _copy_whole_lines(peer.folder / fmt.EVENTS_DIR, load_dir / PEER_DIR / fmt.EVENTS_DIR, suffixes)


# -- the run ----------------------------------------------------------------------------------
class _Prefixed:
    """The recorder's Progress, each line led by the arm and load it is about; a phase's line also by
    the seconds since the sweep began (a long run's log says where its time went)."""

    def __init__(self, ui: rec.Progress, prefix: str, t0: float):
        self.ui, self.prefix, self.t0 = ui, prefix, t0

    def phase(self, text: str) -> None:
        self.ui.phase(f"[{self.prefix} +{time.monotonic() - self.t0:.0f}s] {text}")

    def note(self, text: str) -> None:
        self.ui.note(f"[{self.prefix}] {text}")

    def counter(self, label: str, total: int) -> ContextManager[Callable[[int], None]]:
        return self.ui.counter(f"{self.prefix}: {label}", total)  # no brackets: the bar reads its label as markup


def sweep(plan: SweepPlan, ui: rec.Progress, arms: list[str] | None = None, resume: bool = False) -> SweepOutcome:
    """Run the plan's arms (or those named) into plan.out; each arm's runs that are not complete.
    Ctrl-C and SIGTERM stop the servers and end the sweep with every finished load kept."""
    with claimed(plan.out, resume) as previous:
        state = merged_state(plan, previous)
        write_state(plan.out, state)
        outcome = SweepOutcome(plan.out, state["runs"])
        chosen = arms or [arm.name for arm in plan.arms]
        by_name = {arm.name: arm for arm in plan.arms}
        t0 = time.monotonic()
        own = _own_mps(plan, ui)
        try:
            with rec.terminations_interrupt():
                ran = False  # an arm's servers ran before this one: the GPU must be free again
                for name in chosen:
                    todo = [load for load in plan.loads if _run_of(state, name, load.name)["status"] != RUN_COMPLETE]
                    if not todo:
                        ui.phase(f"[{name}] every load complete already; nothing to run")
                        continue
                    unready = wait_ready(os.environ, _Prefixed(ui, name, t0).note, own if ran else None)
                    ran = True
                    if unready is not None:
                        ui.phase(f"[{name}] FAILED: {unready}")
                        for load in todo:
                            run = _run_of(state, name, load.name)
                            run["status"], run["reason"] = RUN_FAILED, f"the arm's servers were not started: {unready}"
                        outcome.failed_arms.append(name)
                        continue
                    if not _run_arm(plan, by_name[name], todo, state, ui, t0):
                        outcome.failed_arms.append(name)
        except (KeyboardInterrupt, rec.Interrupted):
            outcome.interrupted = True
        finally:
            write_state(plan.out, state)
            if own is not None:
                with rec.shielded():
                    own.stop()
        return outcome


def _own_mps(plan: SweepPlan, ui: rec.Progress) -> OwnMps | None:
    """The sweep's own MPS control daemon (--mps), started before the first arm."""
    if not plan.own_mps:
        return None
    own = OwnMps(os.environ)
    failed = own.start()
    if failed is not None:
        raise SweepRefused(f"--mps: {failed}; start one yourself (nvidia-cuda-mps-control -d) or leave --mps out")
    ui.note(f"MPS: {'the sweep started a control daemon' if own.started else 'a control daemon already answers'} at {own.pipe}")
    return own


def _run_arm(plan: SweepPlan, arm: Arm, todo: list[SweepLoad], state: dict, ui: rec.Progress, t0: float) -> bool:
    """One server lifetime: start, warm up, each load in `todo`, stop. False where the servers did not
    start. KeyboardInterrupt and Interrupted are re-raised once the servers are stopped and the run
    they cut is marked incomplete."""
    arm_dir = plan.out / arm.name
    done = {load.name for load in plan.loads if _run_of(state, arm.name, load.name)["status"] == RUN_COMPLETE}
    aside = _set_aside(arm_dir, done)
    if aside is not None:
        ui.note(f"[{arm.name}] the arm's earlier files moved to {aside}")
    arm_dir.mkdir(parents=True, exist_ok=True)
    arm_ui = _Prefixed(ui, arm.name, t0)
    command = list(plan.command) + list(arm.args)
    peer_plan = None
    if plan.peer is not None:
        peer_command = list(plan.peer.command) + list(arm.args)  # DBO and graph flags must match on both roles
        peer_plan = replace(plan.peer, command=peer_command)
    rplan = rec.RecordPlan(
        command=command, out=arm_dir, server=True, base_url=plan.base_url, load=todo[0].spec,
        warmup_prompts=plan.warmup_prompts, window=plan.window, startup_timeout_s=plan.startup_timeout_s,
        grace_s=plan.grace_s, trace_timeout_s=plan.trace_timeout_s, repeats=plan.repeats, peer=peer_plan,
        python_samples=False, builtin_repeats=plan.builtin_repeats,
    )  # fmt: skip
    argv = rec.command_as_run(rplan)
    launch = rec.prepare_launch(rplan, argv)
    peer, redactor = launch.peer, launch.redactor
    manifest = rec.initial_manifest(rplan, argv)
    manifest["created_by"] = "dbo-trace sweep"
    manifest["log"] = "../server.log"  # the arm's one server lifetime, beside its loads
    (arm_dir / fmt.TRACES_DIR).mkdir(exist_ok=True)
    (arm_dir / fmt.EVENTS_DIR).mkdir(exist_ok=True)
    if peer is not None:
        rec.pair_manifest(rplan, manifest, argv, launch.env, peer)
    child: Child | None = None
    current: tuple[SweepLoad, dict] | None = None  # the load running now, and its manifest

    def mark(load: SweepLoad, status: str, reason: str | None) -> None:
        run = _run_of(state, arm.name, load.name)
        run["status"], run["reason"] = status, redactor.text(reason) if reason else None
        write_state(plan.out, state)

    try:
        arm_ui.phase(f"starting the server{'s' if peer else ''} (flags: {' '.join(arm.args) or 'none'})")
        try:
            # record refuses a taken port before it makes its folder; here each arm is refused in turn (the
            # last arm's server may still hold it), and that arm fails while the sweep goes on.
            rec.refuse_busy_port(plan.base_url)
            child = rec.start_servers(rplan, manifest, launch, arm_ui, arm_dir / "server.log")
            model = rec.bring_up(rplan, child, manifest, arm_ui, peer)
        except (ChildFailed, rec.Refused) as exc:
            not_started = f"the arm's servers did not start: {exc}"
            arm_ui.phase(f"FAILED: {redactor.text(str(exc))}")
            for load in todo:
                mark(load, RUN_FAILED, not_started)
            return False
        stopped_during = None  # the load during which the arm's servers stopped
        for load in todo:
            if stopped_during is not None:
                mark(load, RUN_SKIPPED, f"not run: the arm's servers stopped during {stopped_during}")
                continue
            lm = _load_manifest(manifest, arm, load)
            current = (load, lm)
            status, reason = _run_load(replace(rplan, load=load.spec), child, model, lm, _Prefixed(ui, f"{arm.name} {load.name}", t0), peer, plan)
            current = None
            if child.poll() is not None or (peer is not None and not peer.alive()):
                stopped_during = load.name
            _write_bundle(plan, arm_dir, load, lm, peer, redactor, status, reason)
            mark(load, *_run_status(plan, lm))
        return True
    except (KeyboardInterrupt, rec.Interrupted) as exc:
        # record's wind-up (stop_servers, then finish_bundle) for the load cut short, with its files
        # harvested between (_write_bundle): the window is closed and the servers stopped first.
        if current is not None:
            load, lm = current
            with rec.shielded():
                why = f"interrupted ({exc or 'SIGINT'}) during this load; the bundle holds what was collected"
                # what stopping the servers says is added to the reason (as record's own wind-up adds it)
                status, said = rec.stop_servers(replace(rplan, load=load.spec), child, lm, arm_ui, rec.STATUS_INCOMPLETE, why, peer)
                child = None
                _write_bundle(plan, arm_dir, load, lm, peer, redactor, status, said)
                mark(load, *_run_status(plan, lm))
        raise
    finally:
        with rec.shielded():
            rec.stop_servers(rplan, child, copy.deepcopy(manifest), arm_ui, rec.STATUS_COMPLETE, None, peer)


def _load_manifest(arm_manifest: dict, arm: Arm, load: SweepLoad) -> dict:
    lm = copy.deepcopy(arm_manifest)
    lm["load"] = asdict(load.spec)
    lm["sweep"] = {"arm": arm.name, "load": load.name}
    lm["times"] = {**lm["times"], "load_started": rec.now()}
    return lm


def _run_load(rplan: rec.RecordPlan, child: Child, model: str, lm: dict, ui: rec.Progress, peer: Peer | None, plan: SweepPlan) -> tuple[str, str | None]:
    """One load on the arm's running servers, as record runs its one (rec.record_load): a failure ends
    this load's bundle, not the sweep (record's ends its one run). rplan takes no Python samples."""
    try:
        rec.record_load(rplan, child, model, lm, ui, peer, profile=plan.profile)
        return rec.STATUS_COMPLETE, None
    except ChildFailed as exc:
        ui.phase(f"FAILED: {exc}")
        return rec.STATUS_FAILED, str(exc)


def _write_bundle(plan: SweepPlan, arm_dir: Path, load: SweepLoad, lm: dict, peer: Peer | None, redactor: Redactor, status: str, reason: str | None) -> None:
    load_dir = arm_dir / load.name
    harvest(arm_dir, load_dir, peer)
    lm.setdefault("repeats", [])  # the repeats' files now live in this bundle, at the same relative paths
    no_traces = (
        "profiling was off (dbo-trace sweep --no-profile): this bundle holds the timed repeats only"
        if not plan.profile
        else f"the server wrote no trace in this load's window (POST /stop_profile answered {lm.get('stop_profile_status')})"
    )
    rec.finish_bundle(load_dir, lm, redactor, status, reason, None, no_traces)


def _run_status(plan: SweepPlan, lm: dict) -> tuple[str, str | None]:
    """A run's status in sweep.json: complete where the bundle is (or, with --no-profile, where it has
    its repeats and lacks only the traces it was not asked for)."""
    status = lm["status"]
    if status == rec.STATUS_COMPLETE or (status == rec.STATUS_NO_TRACES and not plan.profile):
        return RUN_COMPLETE, None
    return (RUN_INCOMPLETE if status == rec.STATUS_INCOMPLETE else RUN_FAILED), lm.get("reason")
