"""AFD recognised from the evidence (docs/analysis.md, "Roles from the evidence"): recordings of the
AFD plugin given as bundles, as their `traces/` folders and with the manifest's role keys stripped
(what an older recorder wrote) get the same analysis; a pair given as two trace folders reads as its
bundle does; GPU sharing is told truthfully (time-slicing on the arm recorded without MPS, never on
the arms with it; "under MPS" only where the daemon answered). Truth is counted here in plain Python
from the JSON (gzip + json), and the hidden share by tests/references/round_trips_reference.py.

The arms (tests/data/afd-onegpu, trimmed: README.md there; samples/afd-graphs-dbo whole) are one
H200 running both roles of DeepSeek-V2-Lite's shape (27 layers), decode of 16 tokens."""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path

import pytest
from afd_synth import afd_pair
from conftest import ROOT, SAMPLES, run_cli
from round_trips_reference import hidden_share, round_trips

from dbo_trace.analysis.compare.arms import microbatched
from dbo_trace.analysis.model import Options
from dbo_trace.analysis.afd.role_evidence import FROM_TRACE, TraceEvidence
from dbo_trace.bundle import ROLE_FROM_COMMAND, ROLE_FROM_MANIFEST
from dbo_trace.app.pipeline import analyze_found, analyze_paths
from dbo_trace.render import RENDERERS
from dbo_trace.render.words.notes import role_source_text
from dbo_trace.render.words.verdict import headline, next_step_text, reason_text
from dbo_trace.trace.load import discover

DATA = ROOT / "tests" / "data" / "afd-onegpu"
ARMS = {
    "afd-graphs": DATA / "afd-graphs",
    "afd-graphs-nomps": DATA / "afd-graphs-nomps",
    "afd-eager-dbo": DATA / "afd-eager-dbo",
    "afd-graphs-dbo": SAMPLES / "afd-graphs-dbo",
}
FORMS = ("bundle", "traces", "stripped")
NEWER_KEYS = ("roles", "afd", "gpu_sharing", "peer", "peer_events", "peer_counters")  # what older recorders did not write


def _load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _trace(bundle: Path) -> Path:
    (trace,) = sorted((bundle / "traces").glob("*.json.gz"))
    return trace


def data_kernels_per_step(trace: Path) -> float:
    """Median over vLLM's `execute_*` steps of the SendRecv kernels launched in the step, less the
    control plane's (launched inside a c10d::send op), halved: a send and its receive per round trip."""
    ev = [e for e in _load(trace)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("execute_"))
    control = [(e["ts"], e["ts"] + e["dur"], e["tid"]) for e in ev if e.get("cat") == "cpu_op" and e["name"] == "c10d::send"]
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    counts = [0] * len(steps)
    for k in ev:
        if k.get("cat") != "kernel" or "SendRecv" not in k["name"]:
            continue
        call = calls.get(k["args"].get("correlation"))
        if call is None or any(a <= call["ts"] <= b and t == call["tid"] for a, b, t in control):
            continue
        for i, (a, b) in enumerate(steps):
            if a <= call["ts"] <= b:
                counts[i] += 1
    return statistics.median(counts) / 2


def _dbo(bundle: Path) -> bool:
    return "--enable-dbo" in json.loads((bundle / "manifest.json").read_text())["command"]


def stripped(bundle: Path, into: Path) -> Path:
    """A copy of the bundle whose manifest lacks what only the newest recorder writes."""
    out = into / bundle.name
    shutil.copytree(bundle, out, ignore=shutil.ignore_patterns("pystacks", "bench", "events", "peer"))
    manifest = json.loads((out / "manifest.json").read_text())
    for key in NEWER_KEYS:
        manifest.pop(key, None)
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("old")
    out = {}
    for arm, bundle in ARMS.items():
        paths = {"bundle": bundle, "traces": bundle / "traces", "stripped": stripped(bundle, tmp)}
        out[arm] = {form: analyze_paths([p], Options()) for form, p in paths.items()}
    return out


def _attention(report):
    (rank,) = [r for r in report.ranks if r.afd is not None]
    return rank


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("arm", ARMS)
def test_round_trips_microbatched_and_hidden_share(reports, arm, form):
    bundle = ARMS[arm]
    report = reports[arm][form]
    rank = _attention(report)
    truth = data_kernels_per_step(_trace(bundle))
    assert truth == (54 if _dbo(bundle) else 27)
    assert rank.role == "attention"
    assert abs(rank.afd.per_step - truth) <= 0.1 * truth
    assert report.round_trips is not None and abs(report.round_trips.per_step - truth) <= 0.1 * truth
    assert rank.afd.microbatched is _dbo(bundle) and microbatched(report) is _dbo(bundle)
    assert abs(hidden_share(round_trips(_trace(bundle))) - rank.afd.hidden_share) <= 0.03
    assert report.verdict.label == reports[arm]["bundle"].verdict.label  # the same analysis, however given


@pytest.mark.parametrize("arm", ARMS)
def test_where_the_role_came_from_is_said(reports, arm):
    calls = {form: _attention(reports[arm][form]).role_source for form in FORMS}
    assert {form: c.source for form, c in calls.items() if c is not None} == {
        "bundle": ROLE_FROM_MANIFEST, "stripped": ROLE_FROM_COMMAND, "traces": FROM_TRACE
    }
    said = {form: role_source_text(c) for form, c in calls.items() if c is not None}
    assert said["bundle"] == "the bundle manifest's roles"
    assert said["stripped"].startswith("the recorded command line")
    assert said["traces"].startswith("the trace (process group 'afd' of 2 ranks in distributedInfo")
    assert ("vllm::afd_p2p_send/recv ops" in said["traces"]) is (arm == "afd-eager-dbo")  # the eager arm's ops
    doc = json.loads(RENDERERS["json"].render(reports[arm]["traces"]))
    assert doc["ranks"][0]["role"] == "attention" and doc["ranks"][0]["role_source"] == said["traces"]
    assert "roles: rank 0 attention (from the trace" in " ".join(RENDERERS["terminal"].render(reports[arm]["traces"]).split())


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("arm", ARMS)
def test_time_slicing_only_without_mps(reports, arm, form):
    """The arm recorded without MPS: its receive waits ~4.44 ms against an 18 us send (plain Python
    below); the arms with MPS: 10x and less. No manifest here verified MPS: none says it ran."""
    report = reports[arm][form]
    rts = round_trips(_trace(ARMS[arm]))
    ratio = statistics.median(r["r1"] - r["r0"] for r in rts) / statistics.median(r["s1"] - r["s0"] for r in rts)
    sliced = report.roles.time_slicing
    assert sliced is not None and sliced.ratio == pytest.approx(ratio, rel=1e-6)
    assert sliced.sliced is (arm == "afd-graphs-nomps") is (ratio > 50)
    text = " ".join(RENDERERS["terminal"].render(report).split())
    assert ("time-slice it" in text) is (arm == "afd-graphs-nomps")
    assert "under MPS" not in text and "MPS answered" not in text
    if sliced.sliced:  # one GPU from the manifest (its gpu_sharing, or one GPU on the host): a bare trace cannot tell
        first = report.verdict.reasons[0]
        assert first.kind == "time_slicing"
        said = reason_text(first)
        assert said.startswith("both roles share one GPU" if form != "traces" else "the round trip is far above its transfer: if")
        assert "time-slice it: a round trip takes 4.46 ms" in said
        step = report.verdict.next_step
        assert step is not None and step.kind == "start_mps" and "nvidia-cuda-mps-control -d" in next_step_text(step)


def _with_sharing(bundle: Path, into: Path, **sharing) -> Path:
    out = into / bundle.name
    shutil.copytree(bundle, out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["gpu_sharing"] |= sharing
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_mps_said_only_where_its_daemon_answered(tmp_path):
    answered = analyze_paths([_with_sharing(ARMS["afd-graphs"], tmp_path / "a", mps_daemon="answered")], Options())
    text = " ".join(RENDERERS["terminal"].render(answered).split())
    assert answered.roles.mps is True and "under MPS (its control daemon answered" in text and "time-slice" not in text
    # the arm without MPS, had its manifest claimed a daemon that answered: not called time-sliced
    claimed = analyze_paths([_with_sharing(ARMS["afd-graphs-nomps"], tmp_path / "b", mps_daemon="answered")], Options())
    assert not claimed.roles.time_slicing.sliced
    off = analyze_paths([_with_sharing(ARMS["afd-graphs-nomps"], tmp_path / "c", mps_daemon="not running", mps=False)], Options())
    text = " ".join(RENDERERS["terminal"].render(off).split())
    assert off.roles.mps is False and "without MPS (its control daemon did not answer)" in text
    assert "both roles share one GPU (MPS not running) and their CUDA contexts time-slice it" in text
    doc = json.loads(RENDERERS["json"].render(off))
    assert doc["roles"]["sharing"]["mps_daemon"] == "not running" and doc["roles"]["time_slicing"]["sliced"] is True


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A synthetic pair with both roles traced (tests/helpers/afd_synth.py), read as its bundle and as two
    trace folders (no manifest: roles from the traces alone)."""
    folder = tmp_path_factory.mktemp("pair") / "bundle"
    truth = afd_pair(folder, dbo=True, graphs=True, layers=3, steps=5)
    folders = [folder / "traces", folder / "peer" / "traces"]
    return folder, truth, analyze_paths([folder], Options()), analyze_paths(folders, Options())


def ffn_compute_per_step(folder: Path) -> float:
    """Median over the attention's steps (an annotation's start to the next one's) of the FFN's
    non-NCCL kernel time starting in it, on the attention's clock (baseTimeNanoseconds)."""
    a = _load(folder / "traces" / "attention.pt.trace.json.gz")
    f = _load(folder / "peer" / "traces" / "ffn.pt.trace.json.gz")
    offset = (f["baseTimeNanoseconds"] - a["baseTimeNanoseconds"]) / 1000
    starts = sorted(e["ts"] for e in a["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("execute_"))
    kernels = [(e["ts"] + offset, e["dur"]) for e in f["traceEvents"] if e.get("cat") == "kernel" and "nccl" not in e["name"].lower()]
    return statistics.median(sum(d for t, d in kernels if lo <= t < hi) for lo, hi in zip(starts, starts[1:]))


def test_pair_roles_and_ffn_compute(pair):
    folder, truth, bundle, folders = pair
    expected = ffn_compute_per_step(folder)
    for report in (bundle, folders):
        assert [(r.rank, r.role) for r in report.ranks] == [(0, "attention"), (1, "ffn")]
        p = report.roles.pair
        assert p is not None and abs(p.ffn_compute_per_step_us - expected) <= 0.15 * expected
        assert p.ffn_compute_per_round_trip_us == pytest.approx(58.0, rel=0.05)  # the synthetic FFN's kernel
        assert 0 < p.both_busy <= min(p.attention_busy, p.ffn_busy) <= 1
        a = _attention(report).afd
        assert a.median_part("compute_us") + a.median_part("queue_us") == pytest.approx(a.median_part("ffn_us"), abs=1e-6)
    ffn_call = folders.ranks[1].role_source
    assert ffn_call is not None and ffn_call.evidence is not None and ffn_call.evidence.attention_kernels == 0
    assert role_source_text(ffn_call).startswith("the trace (process group 'afd' of 2 ranks in distributedInfo (and 'p2p'), no attention kernel")


def test_pair_as_two_folders_is_no_collective_group(pair):
    folder, truth, bundle, folders = pair
    assert folders.cross_rank is None and bundle.cross_rank is None
    text = " ".join(RENDERERS["terminal"].render(folders).split())
    for absent in ("not matched", "started last", "skew", "across ranks", "time-slice"):
        assert absent not in text
    assert headline(folders.verdict) == headline(bundle.verdict)
    assert folders.round_trips.per_step == bundle.round_trips.per_step == 6
    ffn = folders.ranks[1]
    assert ffn.window.window_us < 10_000  # its 7.7 s last receive cut to the attention's window, as in the bundle


def test_pair_in_worker_processes_reads_the_same(pair):
    folder, truth, bundle, folders = pair
    paths = [folder / "traces", folder / "peer" / "traces"]
    parallel = analyze_found(discover(paths), Options(), [str(p) for p in paths], workers=2)
    assert RENDERERS["json"].render(parallel) == RENDERERS["json"].render(folders)


def test_a_trace_of_no_afd_run_gets_no_role():
    report = analyze_paths([SAMPLES / "vllm-graphs-decode"], Options())
    assert all(r.role is None and r.afd is None for r in report.ranks) and report.roles is None


@pytest.mark.parametrize("form", FORMS)
def test_graphs_dbo_is_not_called_faster_than_graphs(reports, form):
    """By step period (the plain count: 8.84 ms on graphs' kept steps, 10.12 ms on graphs+DBO's), in
    whatever form the two arms are given."""
    from dbo_trace.analysis.compare.arms import arms_of, compare

    first, second = compare([arms_of(arm, reports[arm][form], [])[0] for arm in ("afd-graphs", "afd-graphs-dbo")])
    graphs, dbo, vs = first.measured, second.measured, second.vs_first
    assert vs is not None and vs.change is not None and vs.change > 0.05 and dbo.step_median_us > graphs.step_median_us
    assert dbo.round_trips_per_layer == 2 and graphs.round_trips_per_layer == 1



def test_a_real_pair_given_as_two_trace_folders_is_labelled_as_its_bundle_labels_it():
    """samples/afd-pair-graphs-dbo: both roles traced on the H200. The FFN's trace runs the plugin's
    afd_p2p ops too: its role comes from running no attention kernel and receiving the control plane.
    As two folders the pair is one pair, never a collective group: no skew, no unmatched collectives."""
    sample = ROOT / "samples" / "afd-pair-graphs-dbo"
    folders = (sample / "traces", sample / "peer" / "traces")
    as_folders = json.loads(run_cli("report", *map(str, folders), "--json").stdout)
    as_bundle = json.loads(run_cli("report", str(sample), "--json").stdout)
    assert [r["role"] for r in as_folders["ranks"]] == [r["role"] for r in as_bundle["ranks"]] == ["attention", "ffn"]
    assert "no attention kernel" in as_folders["ranks"][1]["role_source"]
    assert "0 sends, 196 receives" in as_folders["ranks"][1]["role_source"]
    for key in ("round_trips_per_step", "steps"):
        assert as_folders["roles"]["pair"][key] == as_bundle["roles"]["pair"][key]
    text = run_cli("report", *map(str, folders), "--markdown").stdout
    for absent in ("started last", "skew", "not matched"):
        assert absent not in text


def _without_afd_role(bundle: Path, into: Path, *, command_role: bool) -> Path:
    """A copy of the bundle whose manifest keeps its `afd` block without a role, and names no
    `roles`; its recorded command line keeps its role or not."""
    out = into / f"{bundle.name}-{'command' if command_role else 'no'}-role"
    shutil.copytree(bundle, out, ignore=shutil.ignore_patterns("pystacks", "bench", "events", "peer"))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.pop("roles")
    manifest["afd"].pop("role")
    if not command_role:
        manifest["command"] = [a for a in manifest["command"] if '"afd"' not in a]
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.mark.parametrize("command_role", [True, False])
def test_an_afd_block_without_a_role_declares_none(tmp_path, command_role):
    """The manifest's `afd` block is read one way (docs/bundle-format.md): without a role it
    declares none, neither to the bundle reader nor to the run's options (which once took it as
    attention); the role comes from the recorded command line, else from the trace itself."""
    from dbo_trace.analysis.afd.role_evidence import resolve_role
    from dbo_trace.app.pipeline import recording_of
    from dbo_trace.bundle import read_bundle

    path = _without_afd_role(ARMS["afd-graphs"], tmp_path, command_role=command_role)
    bundle = read_bundle(path)
    (claims,) = set(bundle.role_claims.values()) or {None}
    if command_role:
        call = resolve_role(claims, lambda: pytest.fail("a claimed role does not read the trace"))
        assert call is not None and (call.role, call.source) == ("attention", ROLE_FROM_COMMAND)
    else:
        assert claims is None
    assert recording_of([bundle.manifest], bundle.role_claims).disaggregated is command_role
    rank = _attention(analyze_paths([path], Options()))
    assert rank.role == "attention" and rank.role_source.source == (ROLE_FROM_COMMAND if command_role else FROM_TRACE)


def test_disaggregated_is_an_attention_role_a_bundle_declared():
    """Only what a recording claims (its manifest, its command line) makes the run disaggregated; a
    trace's own evidence speaks for that trace alone (resolve_role), so it is not among the claims."""
    from dbo_trace.analysis.afd.role_evidence import declares_attention, resolve_role
    from dbo_trace.bundle import RoleClaims

    assert declares_attention([RoleClaims(manifest="attention")])
    assert declares_attention([RoleClaims(manifest="ffn"), RoleClaims(command="attention")])
    assert not declares_attention([RoleClaims(manifest="ffn")])  # an FFN server alone: no round trips
    assert not declares_attention([])
    # one trace claimed two ways: the role the rule decides (the manifest's) is what declares
    assert not declares_attention([RoleClaims(manifest="ffn", command="attention")])
    # the one rule: the manifest's claim, then the command line's, then the trace's evidence
    both = resolve_role(RoleClaims(manifest="ffn", command="attention"), lambda: pytest.fail("not read"))
    assert both is not None and (both.role, both.source) == ("ffn", ROLE_FROM_MANIFEST)
    assert resolve_role(None, lambda: TraceEvidence(False, False, 0, 0, 0, 0, 0)) is None  # not an AFD trace


def _manifest_truth(bundle: Path) -> tuple[list[str], bool]:
    """From the manifest alone (docs/bundle-format.md): the declared roles listing no trace, and
    whether it claims MPS (`gpu_sharing.mps: true`) without the recorder's verified `mps_daemon`."""
    m = json.loads((bundle / "manifest.json").read_text())
    missing = [role for role in ("attention", "ffn") if role in m.get("roles", {}) and not m["roles"][role].get("traces")]
    sharing = m.get("gpu_sharing") or {}
    return missing, sharing.get("mps") is True and "mps_daemon" not in sharing


DECLARING_ROLES = sorted(m.parent.name for m in SAMPLES.glob("*/manifest.json") if "roles" in json.loads(m.read_text()))


@pytest.mark.parametrize("name", DECLARING_ROLES)
def test_the_roles_block_tells_the_missing_roles_and_an_unverified_mps_claim(name):
    """Version 11's roles block (the analysis's RolesInfo held) against the manifest read by hand:
    its missing roles and the MPS claim it could not verify (the shipped AFD samples: 6)."""
    assert len(DECLARING_ROLES) >= 6
    bundle = SAMPLES / name
    proc = run_cli("report", str(bundle), "--json")
    assert proc.returncode == 0, proc.stderr
    roles = json.loads(proc.stdout)["roles"]
    missing, claimed = _manifest_truth(bundle)
    assert roles["missing"] == missing
    assert roles["sharing"] is not None and roles["sharing"]["mps_claimed"] is claimed
    assert "mps_daemon" not in roles and "shared_from" not in roles
