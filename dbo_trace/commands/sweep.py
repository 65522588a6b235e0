"""`dbo-trace sweep`: an ablation (arms) at several loads, recorded into one sweep folder."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from dbo_trace.commands.common import fail
from dbo_trace.commands.record import peer_plan, refuse_unready_peer
from dbo_trace.errors import UsageError
from dbo_trace.redact import REDACTED
from dbo_trace.record.loadgen import LoadSpec
from dbo_trace.record.recorder import ProfileWindow

DBO_FLAG = "--enable-dbo"
ABLATION_ARMS = (("dbo-off", ""), ("dbo-on", DBO_FLAG))


@dataclass(frozen=True)
class SweepRequest:
    out: Path
    command: tuple[str, ...] = ()  # empty with --resume: read from OUT/sweep.json
    arms: tuple[str, ...] = ()  # NAME='extra serve args'
    dbo_ablation: bool = False
    concurrency: tuple[int, ...] = (16, 32, 64)
    num_prompts: int | None = None  # per load; else prompts_per_slot x concurrency
    prompts_per_slot: int = 4
    input_len: int = 512
    output_len: int = 64
    seed: int = 0
    repeats: int = 3
    profile: bool = True
    window: ProfileWindow = ProfileWindow()
    warmup_prompts: int | None = None  # None: the largest concurrency (every batch size seen once)
    url: str | None = None
    peer_command: str | None = None
    peer_ready_port: int | None = None
    startup_timeout: float = 1200.0
    grace: float = 30.0
    trace_timeout: float = 300.0
    resume: bool = False
    repeat_tool: str = "auto"  # "auto": vllm bench serve where COMMAND is `vllm serve`; "builtin": the built-in load
    mps: bool = False  # the sweep runs its own MPS control daemon, afresh for each arm


def parse_arm(text: str) -> tuple[str, tuple[str, ...]]:
    """NAME='extra serve args' -> (NAME, args)."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise UsageError(f"--arm {text!r}: give NAME='extra serve args', e.g. --arm dbo-on='--enable-dbo'")
    from dbo_trace.record.sweep import is_folder_name

    if not is_folder_name(name):
        raise UsageError(f"--arm {text!r}: an arm's name is its folder's: letters, digits, '-', '_' and '.' only (not 'previous')")
    try:
        return name, tuple(shlex.split(rest))
    except ValueError as exc:
        raise UsageError(f"--arm {text!r}: {exc}; quote the arm's flags as one shell word") from None


def arms_of(request: SweepRequest) -> list[tuple[str, tuple[str, ...]]]:
    arms = [parse_arm(a) for a in request.arms]
    if request.dbo_ablation:
        arms = [(name, tuple(shlex.split(flags))) for name, flags in ABLATION_ARMS] + arms
    names = [name for name, _ in arms]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"arm {dup[0]!r} is named twice; give each --arm its own name")
    return arms


def plan_of(request: SweepRequest):
    """The sweep's plan, and the arms to run now. With --resume and no COMMAND, both come from OUT/sweep.json."""
    from dbo_trace import serve_args
    from dbo_trace.record.sweep import Arm, SweepLoad, SweepPlan, SweepRefused, load_name, read_state

    command = list(request.command)
    peer_command = request.peer_command
    arms = arms_of(request)
    loads_given = None
    if not command:
        if not request.resume:
            raise UsageError("give the server's command after `--`: dbo-trace sweep -o OUT [OPTIONS] -- vllm serve MODEL ...")
        try:
            state = read_state(request.out)
        except SweepRefused as exc:
            raise UsageError(str(exc)) from None
        if state is None:
            raise UsageError(f"{request.out}: holds no sweep.json to resume; give the whole command instead")
        command = list(state.get("command") or [])
        peer_command = shlex.join(state["peer_command"]) if state.get("peer_command") else None
        if not arms:
            arms = [(a["name"], tuple(a["args"])) for a in state.get("arms") or []]
        loads_given = state.get("loads") or []
        repeats, profile = int(state.get("repeats") or 0), bool(state.get("profile"))
        kept = state.get("options")
        options: dict = kept if isinstance(kept, dict) else {}
        request = _with_options(request, options)
        request = replace(request, repeat_tool="builtin" if state.get("repeat_tool") == "builtin" else "auto")
        if any(REDACTED in arg for arg in command + list(state.get("peer_command") or [])):
            raise UsageError(f"{request.out}/sweep.json holds a redacted command (a secret was in it): give the whole command again with --resume")
    else:
        repeats, profile = request.repeats, request.profile
    if not arms:
        raise UsageError("no arm to run: give --dbo-ablation, or --arm NAME='extra serve args' (once per arm)")
    if loads_given is not None:
        loads = [
            SweepLoad(l["name"], LoadSpec(num_prompts=l["num_prompts"], concurrency=l["concurrency"], input_len=l["input_len"], output_len=l["output_len"], seed=request.seed))
            for l in loads_given
        ]
    else:
        if len(set(request.concurrency)) != len(request.concurrency):
            raise UsageError(f"--concurrency {','.join(map(str, request.concurrency))}: a load is named twice")
        loads = [
            SweepLoad(
                load_name(c),
                LoadSpec(
                    num_prompts=request.num_prompts or request.prompts_per_slot * c, concurrency=c,
                    input_len=request.input_len, output_len=request.output_len, seed=request.seed,
                ),
            )
            for c in request.concurrency
        ]  # fmt: skip
    peer = peer_plan(peer_command, request.peer_ready_port)
    refuse_unready_peer(peer)
    warmup = request.warmup_prompts if request.warmup_prompts is not None else max(l.spec.concurrency for l in loads)
    plan = SweepPlan(
        command=command, out=request.out, arms=[Arm(n, a) for n, a in arms], loads=loads, repeats=repeats,
        profile=profile, base_url=(request.url or serve_args.server_url(command)).rstrip("/"), peer=peer,
        window=request.window, warmup_prompts=warmup, startup_timeout_s=request.startup_timeout,
        grace_s=request.grace, trace_timeout_s=request.trace_timeout, builtin_repeats=request.repeat_tool == "builtin",
        own_mps=request.mps,
    )  # fmt: skip
    return plan


def _with_options(request: SweepRequest, options: dict) -> SweepRequest:
    """The request with the options sweep.json kept (a resume from the folder alone runs the same sweep)."""
    given = options.get("window")
    window: dict = given if isinstance(given, dict) else {}
    try:
        return replace(
            request,
            url=url if isinstance(url := options.get("base_url"), str) and url.startswith(("http://", "https://")) else request.url,
            seed=int(options.get("seed", request.seed)),
            warmup_prompts=int(options["warmup_prompts"]) if options.get("warmup_prompts") is not None else request.warmup_prompts,
            window=ProfileWindow(**{k: window[k] for k in ("delay_iterations", "max_iterations", "with_stack") if k in window}),
            peer_ready_port=port if type(port := options.get("peer_ready_port")) is int and 0 < port < 65536 else request.peer_ready_port,
            startup_timeout=float(options.get("startup_timeout_s", request.startup_timeout)),
            grace=float(options.get("grace_s", request.grace)),
            trace_timeout=float(options.get("trace_timeout_s", request.trace_timeout)),
        )
    except (TypeError, ValueError):
        raise UsageError(f"{request.out}/sweep.json: its options are malformed; give the whole command again with --resume") from None


def run(request: SweepRequest) -> None:
    from dbo_trace.record.sweep import RUN_COMPLETE, SweepRefused, sweep
    from dbo_trace.ui import ConsoleProgress

    plan = plan_of(request)
    ui = ConsoleProgress()
    try:
        outcome = sweep(plan, ui, resume=request.resume)
    except SweepRefused as exc:
        fail(str(exc))
    counts: dict[str, int] = {}
    for run_ in outcome.runs:
        counts[run_["status"]] = counts.get(run_["status"], 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    ui.phase(f"sweep: {plan.out} ({summary})")
    if outcome.interrupted:
        raise UsageError(f"interrupted: {plan.out}/sweep.json says which runs finished; `dbo-trace sweep -o {plan.out} --resume` runs the rest", 130)
    if any(r["status"] != RUN_COMPLETE for r in outcome.runs if r["arm"] in {a.name for a in plan.arms}):
        raise UsageError(f"not every run completed (see {plan.out}/sweep.json); `dbo-trace sweep -o {plan.out} --resume` runs the rest", 1)
