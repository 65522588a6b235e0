"""`dbo-trace record`: a DBO run recorded into a bundle."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from dbo_trace.commands import common
from dbo_trace.commands.common import fail
from dbo_trace.errors import UsageError
from dbo_trace.record.loadgen import LoadSpec
from dbo_trace.record.peer import PeerPlan, ready_port
from dbo_trace.record.recorder import ProfileWindow


@dataclass(frozen=True)
class RecordRequest:
    command: tuple[str, ...]
    out: Path | None = None  # checked() fills the default, ./dbo-trace-DATE-TIME
    server: bool | None = None  # None: when COMMAND is `vllm serve`
    url: str | None = None
    load: LoadSpec = LoadSpec()  # the profiled load
    warmup_prompts: int = 8
    window: ProfileWindow = ProfileWindow()  # how the profiler brackets the load
    startup_timeout: float = 1200.0
    grace: float = 30.0
    trace_timeout: float = 300.0
    repeats: int = 3  # timed unprofiled repeats before the profiled window
    peer_command: str | None = None  # a server started beside (the AFD FFN server), as one shell-quoted string
    peer_ready_port: int | None = None
    python_samples: bool = True
    python_sample_rate: int = 100

    def peer(self) -> PeerPlan | None:
        return peer_plan(self.peer_command, self.peer_ready_port)

    def checked(self) -> RecordRequest:
        """The request with its bundle folder named (new or empty) and server mode decided."""
        import datetime as dt

        from dbo_trace import serve_args

        out = self.out or Path(f"dbo-trace-{dt.datetime.now():%Y%m%d-%H%M%S}")
        common.refuse_nonempty(out)
        server = serve_args.is_vllm_serve(list(self.command)) if self.server is None else self.server
        peer = self.peer()
        if peer is not None and not server:
            raise UsageError("--peer-command needs a server to record beside it (COMMAND is not `vllm serve`; add --server)")
        refuse_unready_peer(peer)
        return replace(self, out=out, server=server)


def peer_plan(command: str | None, ready: int | None) -> PeerPlan | None:
    """--peer-command (one shell-quoted string) and --peer-ready-port as the peer's plan (record's and sweep's)."""
    import shlex

    if not command:
        return None
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"--peer-command {command!r}: {exc}; quote it as one shell word") from None
    if not argv:
        raise UsageError("--peer-command is empty: give the peer server's whole command line")
    return PeerPlan(command=argv, ready_port=ready)


def refuse_unready_peer(peer: PeerPlan | None) -> None:
    """A peer whose readiness cannot be told: no AFD port in its command and none given."""
    if peer is not None and ready_port(peer) is None:
        raise UsageError(
            "--peer-command names no AFD port (no --additional-config '{\"afd\": {\"port\": P, ...}}' in it): "
            "give --peer-ready-port PORT, the port the peer listens on once it is ready"
        )


def run(request: RecordRequest) -> None:
    from dbo_trace import serve_args
    from dbo_trace.record.child import ChildFailed
    from dbo_trace.record.recorder import STATUS_COMPLETE, STATUS_INCOMPLETE, RecordPlan, Refused
    from dbo_trace.record.recorder import record as run_record
    from dbo_trace.ui import ConsoleProgress

    command = list(request.command)
    assert request.out is not None and request.server is not None, "run a checked() request"
    plan = RecordPlan(
        command=command,
        out=request.out,
        server=request.server,
        base_url=(request.url or serve_args.server_url(command)).rstrip("/"),
        load=request.load,
        warmup_prompts=request.warmup_prompts,
        window=request.window,
        startup_timeout_s=request.startup_timeout,
        grace_s=request.grace,
        trace_timeout_s=request.trace_timeout,
        repeats=request.repeats,
        peer=request.peer(),
        python_samples=request.python_samples,
        python_sample_rate=request.python_sample_rate,
    )
    ui = ConsoleProgress()
    try:
        outcome = run_record(plan, ui)
    except (ChildFailed, Refused) as exc:  # before anything started (a malformed --profiler-config, a busy port)
        fail(str(exc))
    ui.phase(
        f"bundle: {outcome.bundle} ({outcome.status}; {len(outcome.manifest['traces'])} traces, "
        f"{len(outcome.manifest['events'])} event logs)"
    )
    if outcome.manifest["traces"]:
        ui.phase(f"next: dbo-trace report {outcome.bundle}")
    if outcome.status == STATUS_COMPLETE:
        return
    raise UsageError(outcome.reason or "the recording did not complete", 130 if outcome.status == STATUS_INCOMPLETE else 1)
