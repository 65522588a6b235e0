"""`report --ray ADDRESS`: each rank read and analysed by a Ray task on the node that holds its trace,
the cross-rank step and the document on the driver (docs/performance.md, "Across machines").

The pipeline's steps (dbo_trace/app/pipeline.py: prepare, analyse, finish), with Ray as the executor:
  1. find: on each node named (`NODE:/path`) or, for a path without one, on every node (a glob asked
     of each), what the paths hold there, as discovery's one type (trace/load.py Found: each trace an
     Input naming its node, with its role's claim; the event logs and Python samples read there); the
     driver merges the nodes' (trace/load.py merged: a file on a shared filesystem read once) and
     prepares what every analysis shares from them (pipeline.prepare, pipeline.Shared);
  2. analyse: per trace, a task pinned to its node (node affinity) runs pipeline.analyse_trace, a
     disaggregated run's FFN traces after its attention traces, cut to their window; the rank's report
     with its detail (the whole timeline) stays in that node's object store, and the driver fetches
     only the report without it, the cross-rank step's part of the detail (model.CrossPart: the comm
     kernels, the clock's clues) and what settling the rank numbers reads;
  3. finish on the driver (pipeline.settle, pipeline.finish), whose peer-wait step goes back, per
     rank that waited, to a task on the rank's node, where its detail is.
A failed task is retried once (Ray: max_retries, retry_exceptions); a trace still not analysed is a
warning naming it, its node and why, and the report is of the other ranks. Ctrl-C cancels the tasks.
A task reads only the files its node found under the paths given (resolved: a symbolic link out of
them is refused).

A task runs in a Ray worker, a fresh Python: this module imports nothing of dbo_trace or Ray at its
top, and each task imports only what it needs (the readers and analyses; not click, rich, the renderers).
"""

from __future__ import annotations

import glob
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from dbo_trace.analysis.cross_rank.clocks import Alignment
    from dbo_trace.analysis.model import CrossPart, Options, RankAnalysis, Report, StepTable
    from dbo_trace.analysis.cross_rank.collective_waits import PeerWaits
    from dbo_trace.analysis.context import PeerFigures, PeerStep
    from dbo_trace.app.pipeline import Cut, Plan, Shared
    from dbo_trace.trace.load import Found, Input
    from dbo_trace.trace.timeline import Timeline

INSTALL_HINT = "pip install 'dbo-trace[ray]'"
TASK_RETRIES = 1  # a failed task runs once more, then its rank is named missing
_GLOB = set("*?[")
# The resources every node has; any other is the node's own name (`ray start --resources`).
_STANDARD = {"CPU", "GPU", "memory", "object_store_memory"}


# ---- Where the paths are -------------------------------------------------------------------


@dataclass(frozen=True)
class Given:
    """A path as the user gave it: `NODE:/path` (one node) or `/path` (a glob asked of every node)."""

    text: str
    node: str | None
    path: str


def parse(text: str) -> Given:
    head, sep, tail = text.partition(":")
    if sep and tail.startswith("/") and head and "/" not in head:
        return Given(text, head, tail)
    return Given(text, None, text)


def node_names(node: dict[str, Any]) -> list[str]:
    """The names a node answers to: its id, its address, its host name and its own resources."""
    own = [k for k in node.get("Resources", {}) if k not in _STANDARD and not k.startswith(("node:", "accelerator_type:"))]
    return [node["NodeID"], node.get("NodeManagerAddress", ""), node.get("NodeManagerHostname", ""), *own]


def node_label(node: dict[str, Any]) -> str:
    """A node as the lines name it: its own resource, else its address, and its id's first digits."""
    names = node_names(node)
    own = names[3:]
    return f"{own[0] if own else names[1]} ({names[0][:8]})"


def resolve(given: Given, nodes: list[dict[str, Any]], dead: list[dict[str, Any]]) -> list[dict[str, Any]] | str:
    """The live nodes a path is asked of, or why none."""
    if given.node is None:
        return nodes
    hits = [n for n in nodes if given.node in node_names(n)]
    if len(hits) == 1:
        return hits
    if len(hits) > 1:
        named = ", ".join(node_label(n) for n in hits)
        return f"{given.text}: {given.node} names {len(hits)} nodes ({named}); name one by its node id or a resource only it has"
    known = ", ".join(node_label(n) for n in nodes)
    if dead:  # a dead node keeps its id and address but not its resources: the name may be one of them
        return f"{given.text}: no live node of the cluster is called {given.node} ({len(dead)} dead; live: {known})"
    return f"{given.text}: no node of the cluster is called {given.node} (its nodes: {known})"


# ---- The tasks (they run on the nodes) ------------------------------------------------------


def within(path: str | Path, roots: list[str]) -> bool:
    """Whether the file, its links followed, is one of the paths given or under one."""
    real = Path(os.path.realpath(path))
    return any(real == Path(r) or Path(r) in real.parents for r in roots)


def find(asked: list[tuple[int, str, bool]], node: str) -> tuple[Found, list[str], list[str]]:
    """On a node: per (index, path, is it named on this node), what discover() finds there (a glob is
    expanded here), each trace's Input naming this node, its event logs and samples read here, where
    they are (their warnings with discovery's, in the order found). Returns it, the errors (a path named
    on this node that is not there) and the resolved roots the rank tasks may read under."""
    from dbo_trace.trace.errors import InputError
    from dbo_trace.trace.load import Found, discover, merged, read_logs_and_samples

    founds, errors, roots = [], [], []
    for index, path, named in asked:
        matches = sorted(glob.glob(path)) if _GLOB & set(path) else [path]
        matches = [m for m in matches if os.path.exists(m)]
        if not matches:
            if named:
                errors.append(f"{path}: no such file or directory")
            continue
        for match in matches:
            root = os.path.realpath(match)
            try:
                found = discover([Path(match)], index, node)
            except InputError as exc:
                if named:
                    errors.append(str(exc))
                else:
                    founds.append(Found(warnings=[str(exc)]))
                continue
            roots.append(root)
            outside = [t for t in found.traces + found.logs if not within(t, [root])]
            found.inputs = [i for i in found.inputs if i.path not in outside]
            found.logs = [t for t in found.logs if t not in outside]
            found.pystacks = [e for e in found.pystacks if within(e.path, [root])]
            found = read_logs_and_samples(found)
            said = [f"{t}: leads outside {match} (a symbolic link?); not read" for t in outside]
            found.warnings, found.read_warnings = said + found.warnings + found.read_warnings, []  # in the order found
            founds.append(found)
    return merged(founds), errors, roots


@dataclass(frozen=True)
class Compact:
    """A trace's ranks as the driver needs them: each measurement without its detail, its CrossPart (what
    the cross-rank step and an AFD pair read of its detail, under the number its trace claims: the
    driver numbers it once settled) and the timeline's bounds (settle_ranks reads its claim, source,
    metadata and first and last events). All of it comes back with the analysis, so a node lost later
    costs only its ranks' peer waits."""

    reports: list[RankAnalysis]
    parts: list[CrossPart]
    bounds: list[Timeline]
    node: str  # the id of the node the task ran on (Ray's runtime context): where the trace was read


def analyse(trace: str, index: int, shared: Shared, roots: list[str], cut: Cut | None) -> tuple[Any, Any]:
    """On the trace's node: its ranks read and analysed (pipeline.analyse_trace). Returns (the full
    reports, kept on the node; their Compact, or the trace's one-line error)."""
    from dataclasses import replace

    from dbo_trace.analysis.context import cross_part
    from dbo_trace.app.pipeline import analyse_trace

    if not within(trace, roots):  # the driver asks only for what find() listed; checked again where it is read
        return None, f"{trace}: outside the paths given; not read"
    result = analyse_trace(Path(trace), index, shared, cut)
    if isinstance(result, str):
        return None, result
    import ray

    compact = Compact(
        [replace(r, detail=None) for r in result],  # a copy to send: the node keeps the measurement whole
        [cross_part(r) for r in result],
        [r.detailed().timeline.bounds() for r in result],
        ray.get_runtime_context().get_node_id(),
    )
    return result, compact


def peer_figures_of(full: list[RankAnalysis], k: int, rank: int, waits: PeerWaits, alignment: Alignment) -> Any:
    """On the rank's node: its comm as its peers' waits tell it (analysis/context.py peer_figures)."""
    from dbo_trace.analysis.context import peer_figures

    return peer_figures(full[k], rank, waits, alignment)


# ---- The driver ------------------------------------------------------------------------------


# Ray's failures that are about the machine, not the trace, in the user's words
_RAY_FAILURES = {
    "TaskUnschedulableError": "its node left the cluster",
    "NodeDiedError": "its node died",
    "WorkerCrashedError": "the task's worker process died",
    "OutOfMemoryError": "its node ran out of memory",
    "ObjectLostError": "its result was lost with its node",
    "OwnerDiedError": "its result was lost with its node",
    "ObjectReconstructionFailedError": "its result was lost with its node",
}


def why(exc: BaseException) -> str:
    """A failed task's reason in a few words: Ray's failure in plain words, or the exception inside
    Ray's wrapper (a bug: its first line)."""
    for kind in type(exc).__mro__:
        if kind.__name__ in _RAY_FAILURES:
            return _RAY_FAILURES[kind.__name__]
    cause = getattr(exc, "cause", None)
    inner = cause if isinstance(cause, BaseException) else exc
    text = str(inner).strip().splitlines()
    first = next((line for line in text if line.strip() and not line.startswith("Traceback")), "")
    name = type(inner).__name__
    return f"{name}: {first[:160]}" if first else name


class Counter:
    """Ranks done / total on stderr: a line per rank where stderr is a file, one rewritten line on a terminal."""

    def __init__(self, total: int, stream: Any = None) -> None:
        self.total, self.done, self.stream = total, 0, stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def step(self, label: str) -> None:
        from dbo_trace.errors import inert

        self.done += 1
        line = f"dbo-trace: ranks analysed {self.done}/{self.total} (last: {inert(label)})"
        if self.tty:
            self.stream.write("\r\x1b[2K" + line + ("\n" if self.done == self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def analyze_on_ray(address: str, paths: list[str], options: Options, stream: Any = None) -> Report:
    """The report of the traces the cluster's nodes hold under paths (`NODE:/path` or globs asked of
    every node): the same document as `report` of those files on one machine."""
    try:
        import ray
    except ImportError:
        from dbo_trace.errors import UsageError

        raise UsageError(f"--ray needs Ray on this machine and on every node: {INSTALL_HINT}") from None
    _quiet(ray)
    if not ray.is_initialized():  # once per process: compare analyses each arm here
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, configure_logging=False)
        except Exception as exc:  # ConnectionError, ValueError, RuntimeError: the address is not a cluster
            from dbo_trace.errors import UsageError

            raise UsageError(
                f"--ray {address}: cannot connect to a Ray cluster there ({why(exc)}); start one with `ray start`"
            ) from None
    return _analyze(ray, paths, options, stream)


def _quiet(ray: Any) -> None:
    """Ray's driver prints the cluster's error messages (a node marked dead, ...) to stdout, where
    the report goes: each becomes its first line on stderr, made inert. A private hook of Ray's
    (ray._private.worker.print_to_stdstream); where it is not there, Ray prints as it does."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    if worker is None or not hasattr(worker, "print_to_stdstream"):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool = False) -> None:
        from dbo_trace.errors import inert

        for line in data.get("lines", [])[:1]:
            first = str(line).strip().splitlines()[0] if str(line).strip() else ""
            if first:
                sys.stderr.write(f"dbo-trace: ray: {inert(first[:200])}\n")

    worker.print_to_stdstream = to_stderr


def _pinned(ray: Any, fn: Callable[..., Any], node_id: str, **options: Any) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    return ray.remote(fn).options(scheduling_strategy=strategy, num_cpus=1, **options)


def _analyze(ray: Any, paths: list[str], options: Options, stream: Any) -> Report:
    """The pipeline's steps (dbo_trace/app/pipeline.py) with Ray as the executor: find on the nodes,
    prepare here, analyse each trace on its node (the FFN's after the attention's, cut to their
    window), finish here with the peer waits sent back to where each rank's detail is."""
    from dbo_trace.app.pipeline import analyse_rounds, finish, prepare, settle
    from dbo_trace.trace.errors import InputError

    given = [parse(p) for p in paths]
    every = ray.nodes()
    label = {n["NodeID"]: node_label(n) for n in every}
    by_node, warnings = _asked(every, given)
    found, roots = _find_on_nodes(ray, by_node, given, label, warnings)
    traces = found.inputs  # each once, with the node that reads it
    if not traces:
        raise InputError(warnings[0] if warnings else "no node found a trace under the paths given")
    nodes = [n for n in every if n.get("Alive")]
    for i, g in enumerate(given):
        if g.node is None and not any(t.given == i for t in traces):
            raise InputError(f"{g.path}: no node of the cluster holds a trace there (asked {len(nodes)} nodes)")
    plan = prepare(found, options)  # the nodes' warnings are the driver's (finish's warnings), after the ranks'
    tasks = _Tasks(ray, plan, traces, roots, label, stream)
    cut = analyse_rounds(plan, tasks)
    results = [tasks.results[k] for k in range(len(traces))]
    ranks = [c.reports if isinstance(c, Compact) else c for c in results]
    settled = settle(ranks, [c.bounds if isinstance(c, Compact) else [] for c in results])
    home = [(k, j) for k, c in enumerate(results) if isinstance(c, Compact) for j in range(len(c.reports))]
    place = {settled.numbers[i]: home[i] for i in settled.order}  # a settled rank number -> (its trace, its place in it)
    parts = [p for c in results if isinstance(c, Compact) for p in c.parts]  # in the order the results list them
    return finish(plan, settled, _inputs(given, traces), cut=cut, parts=parts, peer_step=tasks.peer_step(place), warnings=warnings)


def _asked(every: list[dict[str, Any]], given: list[Given]) -> tuple[dict[str, list[tuple[int, str, bool]]], list[str]]:
    """Per live node, the paths it is asked about: (index of the path given, path, named on it)."""
    from dbo_trace.trace.errors import InputError

    nodes = sorted((n for n in every if n.get("Alive")), key=lambda n: node_label(n))
    dead = [n for n in every if not n.get("Alive")]
    by_node: dict[str, list[tuple[int, str, bool]]] = {}
    warnings: list[str] = []
    for g in given:
        if not g.path.startswith("/"):  # a task's working folder is Ray's, on another machine
            raise InputError(f"{g.text}: --ray takes absolute paths, NODE:/path or /path (a glob asked of every node)")
    for i, g in enumerate(given):
        where = resolve(g, nodes, dead)
        if isinstance(where, str):
            if g.node is not None and dead:
                warnings.append(f"{where}: the ranks there are missing from this report")
                continue
            raise InputError(where)
        for n in where:
            by_node.setdefault(n["NodeID"], []).append((i, g.path, g.node is not None))
    return by_node, warnings


def _find_on_nodes(
    ray: Any, by_node: dict[str, list[tuple[int, str, bool]]], given: list[Given], label: dict[str, str], warnings: list[str]
) -> tuple[Found, dict[str, list[str]]]:
    """find() on each node asked; what they found, merged (trace/load.py merged: each trace once, a file
    on a shared filesystem read by the least-loaded node), their warnings added to warnings with the
    node's name; and per node the roots its tasks may read under."""
    from dbo_trace.trace.errors import InputError
    from dbo_trace.trace.load import merged

    finding = {
        node: _pinned(ray, find, node, max_retries=TASK_RETRIES, retry_exceptions=True).remote(asked, node)
        for node, asked in by_node.items()
    }
    founds, roots = [], {}
    for node, ref in finding.items():
        try:
            found, errors, roots[node] = _get(ray, ref, [r for r in finding.values()])
        except _TaskFailed as exc:
            asked = ", ".join(given[i].text for i, _, _ in by_node[node])
            warnings.append(f"node {label[node]}: could not list {asked} ({exc}); the ranks there are missing from this report")
            continue
        if errors:
            raise InputError(f"{errors[0]} (on node {label[node]})")
        warnings += [f"{w} (on node {label[node]})" for w in found.warnings + found.read_warnings]
        found.warnings, found.read_warnings = [], []  # the driver's now, with the node's name
        founds.append(found)
    return merged(founds, label.__getitem__), roots


class _Tasks:
    """The rank tasks of one report: each trace analysed on its node, its full reports kept there."""

    def __init__(
        self, ray: Any, plan: Plan, traces: list[Input], roots: dict[str, list[str]], label: dict[str, str],
        stream: Any,
    ) -> None:  # fmt: skip
        self.ray, self.plan, self.traces, self.roots, self.label = ray, plan, traces, roots, label
        self.shared = ray.put(plan.shared)
        self.full: dict[int, Any] = {}  # per trace: the reference to its full reports, on its node
        self.results: dict[int, Compact | str] = {}
        self.counter = Counter(len(traces), stream)

    # The pipeline's executor (app/pipeline.py Executor): analyse_rounds drives these.
    def told_ffn(self, first: list[int]) -> list[int]:
        from dbo_trace.analysis.afd.roles import FFN

        return [k for k in first if isinstance(c := self.results[k], Compact) and any(r.role == FFN for r in c.reports)]

    def attention(self, first: list[int]) -> list[tuple[Timeline, StepTable]]:
        """The attention ranks' bounds (Timeline.bounds: their first start and last end, all the cut needs), with their steps."""
        from dbo_trace.analysis.afd.roles import ATTENTION

        compact = [c for k in first if isinstance(c := self.results[k], Compact)]
        return [(b, r.steps.table) for c in compact for r, b in zip(c.reports, c.bounds) if r.role == ATTENTION]

    def again(self, told: list[int], cut: Cut) -> None:
        """Each task again on its node, cut to the window (its full reports are there, not here)."""
        self.counter.total += len(told)
        self.analyse(told, cut)

    def analyse(self, which: list[int], cut: Cut | None) -> None:
        """The traces at these positions, each a task pinned to its node; Ctrl-C and SIGTERM cancel them."""
        from dbo_trace.trace.workers import sigterm_interrupts

        ray, refs = self.ray, {}
        for k in which:
            node = self.node_of(k)
            task = _pinned(ray, analyse, node, num_returns=2, max_retries=TASK_RETRIES, retry_exceptions=True)
            self.full[k], compact_ref = task.remote(str(self.traces[k].path), k, self.shared, self.roots[node], cut)
            refs[compact_ref] = k
        try:
            pending = list(refs)
            with sigterm_interrupts():  # SIGTERM as Ctrl-C: the tasks are cancelled, not left running
                while pending:
                    ready, pending = ray.wait(pending, num_returns=1)
                    self._done(refs[ready[0]], ready[0])
        except BaseException:  # Ctrl-C, SIGTERM: the tasks stop with the driver
            for ref in refs:
                ray.cancel(ref, force=True)
            raise

    def node_of(self, k: int) -> str:
        """The node that holds the k-th trace (found there: every Input of a Ray run names its node)."""
        node = self.traces[k].node
        assert node is not None
        return node

    def _done(self, k: int, ref: Any) -> None:
        node, path = self.node_of(k), self.traces[k].path
        try:
            self.results[k] = self.ray.get(ref)
        except Exception as exc:  # retried once already (max_retries, retry_exceptions)
            self.results[k] = f"the rank in {path} (node {self.label[node]}): not analysed ({why(exc)}); missing from this report"
        done = self.results[k]
        ran = f"on {self.label.get(done.node, done.node)}" if isinstance(done, Compact) else f"on {self.label[node]}: failed"
        self.counter.step(f"{path} {ran}")

    def peer_step(self, place: dict[int, tuple[int, int]]) -> PeerStep:
        """combine's peer step: each rank that waited for a peer gets its PeerFigures on its node, where
        its detail is; a rank whose task failed keeps its own, with a warning."""
        return lambda ranks, numbers, waits, alignment: self._peers(ranks, numbers, waits, alignment, place)

    def _peers(
        self, ranks: Sequence[RankAnalysis], numbers: Sequence[int], waits: PeerWaits, alignment: Alignment,
        place: dict[int, tuple[int, int]],
    ) -> tuple[dict[int, PeerFigures], list[str]]:  # fmt: skip
        from dbo_trace.analysis.cross_rank.collective_waits import PeerWaits as Waits

        ray, asked = self.ray, {}
        for r, n in zip(ranks, numbers):
            if r.exposure is None or not len(waits.kernel_wait_us.get(n, ((),))[0]):
                continue
            k, j = place[n]
            mine = Waits(  # its own kernels' waits: what its figures read
                ops=[], ranks={n: waits.ranks[n]} if n in waits.ranks else {}, kernel_wait_us={n: waits.kernel_wait_us[n]},
                threshold_us=waits.threshold_us, zero_us=waits.zero_us,
            )  # fmt: skip
            task = _pinned(ray, peer_figures_of, self.node_of(k), max_retries=TASK_RETRIES, retry_exceptions=True)
            asked[n] = task.remote(self.full[k], j, n, mine, alignment)
        out, notes = {}, []
        for n, ref in asked.items():
            try:
                found = _get(ray, ref, list(asked.values()))
            except _TaskFailed as exc:
                node = self.label[self.node_of(place[n][0])]
                notes.append(f"rank {n} on node {node}: its waits for peer ranks were not applied ({exc}); "
                             "its exposed comm is as measured on its own")  # fmt: skip
                continue
            if found is not None:
                out[n] = found
        return out, notes


class _TaskFailed(Exception):
    pass


def _get(ray: Any, ref: Any, every: list[Any]) -> Any:
    """A task's result; Ctrl-C cancels every task given; a failure is _TaskFailed with its reason."""
    try:
        return ray.get(ref)
    except KeyboardInterrupt:
        for r in every:
            ray.cancel(r, force=True)
        raise
    except Exception as exc:
        raise _TaskFailed(why(exc)) from None


def _inputs(given: list[Given], traces: list[Input]) -> list[str]:
    """The document's inputs, as a local run over the same files names them: a path named on a node
    without the node; a glob as the files it matched."""
    out: list[str] = []
    for i, g in enumerate(given):
        if not (_GLOB & set(g.path)):
            out.append(g.path)
        else:
            out += [str(t.path) for t in traces if t.given == i]
    return list(dict.fromkeys(out))
