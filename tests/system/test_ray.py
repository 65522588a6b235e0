"""`report --ray` and `compare --ray` on a local Ray cluster of two nodes started here on 127.0.0.1,
each node named by a resource of its own and given its own folder of traces (dbo_trace/app/ray_executor.py):
where each rank ran, the document against a local run's byte for byte, the failures (a node killed
while its ranks run, a node already dead, paths that lead outside what was given). Skipped where
Ray is not installed, unless DBO_TRACE_REQUIRE_RAY is set (.ci/run installs it)."""

import gzip
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import SAMPLES, popen_interruptible, run_cli, run_cli_process, unwrapped

if importlib.util.find_spec("ray") is None:
    if os.environ.get("DBO_TRACE_REQUIRE_RAY"):
        raise RuntimeError("ray is not importable, but DBO_TRACE_REQUIRE_RAY is set (see .ci/run)")
    pytest.skip("ray is not installed (pip install 'dbo-trace[ray]')", allow_module_level=True)

RAY = Path(sys.executable).parent / "ray"
RANKS = 8
# The head's health checks: a killed node is marked dead in about 2 s instead of 30
HEAD_ENV = {"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500", "RAY_health_check_failure_threshold": "3"}
# A delay on a node's worker leases (a Ray testing switch): its tasks wait long enough to kill it while they run
SLOW_LEASES = {"RAY_testing_asio_delay_us": "NodeManagerService.grpc_server.RequestWorkerLease=8000000:8000000"}



def eight_ranks(base: Path) -> dict[str, Path]:
    """An 8-rank run: the two-GPU overlap sample's ranks repeated as ranks 0-7 of one world (each its
    own distributedInfo rank), 0-3 in a/ for node-a and 4-7 in b/ for node-b."""
    sources = sorted((SAMPLES / "two-gpu-overlap" / "traces").glob("*.json.gz"))
    docs = [json.loads(gzip.decompress(p.read_bytes())) for p in sources]
    folders = {"node-a": base / "a", "node-b": base / "b"}
    for folder in folders.values():
        folder.mkdir(parents=True)
    for rank in range(RANKS):
        doc = json.loads(json.dumps(docs[rank % 2]))
        info = doc["distributedInfo"]
        info.update(rank=rank, world_size=RANKS)
        info["pg_config"][0].update(pg_size=RANKS, ranks=list(range(RANKS)))
        folder = folders["node-a" if rank < 4 else "node-b"]
        (folder / f"rank{rank}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    return folders


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """Ray nodes, each a `ray start --block` in its own session, stopped by killing that session's
    process group (the node's raylet and its workers with it)."""

    def __init__(self, base: Path) -> None:
        self.temp = Path(tempfile.mkdtemp(prefix="dbo-ray-", dir="/tmp"))  # Ray's sockets need a short path
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, subprocess.Popen] = {}
        self.base = base

    def start(self, name: str, cpus: int = 1, env: dict[str, str] | None = None) -> None:
        head = not self.nodes
        where = ["--head", "--port", str(self.port), "--temp-dir", str(self.temp), "--include-dashboard=false"] if head \
            else ["--address", self.address]  # fmt: skip
        command = [str(RAY), "start", "--block", *where, "--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus),
                   "--num-gpus", "0", "--resources", json.dumps({name: 1})]  # fmt: skip
        log = open(self.base / f"{name}.log", "wb")
        environ = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(HEAD_ENV if head else {}), **(env or {})}
        self.nodes[name] = subprocess.Popen(command, stdout=log, stderr=log, env=environ, start_new_session=True)
        self.wait_for(name)

    def alive(self) -> set[str]:
        script = (
            "import ray, json; ray.init(address=%r, logging_level='ERROR', log_to_driver=False);"
            "print(json.dumps([k for n in ray.nodes() if n['Alive'] for k in n['Resources'] if k.startswith('node-')]))"
        ) % self.address
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        return set(json.loads(proc.stdout.strip().splitlines()[-1])) if proc.returncode == 0 and proc.stdout.strip() else set()

    def wait_for(self, name: str, timeout: float = 120) -> None:
        """Until `ray start` says the node runs (its log), then until the cluster lists it."""
        deadline, log = time.monotonic() + timeout, self.base / f"{name}.log"
        while time.monotonic() < deadline:
            if self.nodes[name].poll() is not None:
                raise RuntimeError(f"ray node {name} exited: {log.read_text()[-2000:]}")
            if "Ray runtime started" in log.read_text(errors="replace") and name in self.alive():
                return
            time.sleep(0.5)
        raise RuntimeError(f"ray node {name} did not join in {timeout} s")

    def kill(self, name: str) -> None:
        process = self.nodes.pop(name)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()

    def stop(self) -> None:
        for name in reversed(list(self.nodes)):  # the head last
            self.kill(name)
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("ray")
    folders = eight_ranks(base / "traces")
    ray = Cluster(base)
    try:
        ray.start("node-a", cpus=2)
        ray.start("node-b")
        yield ray, folders
    finally:
        ray.stop()


def on_ray(address: str, *args: str) -> subprocess.CompletedProcess:
    proc = run_cli_process(*args[:1], "--ray", address, *args[1:])
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def where_ran(stderr: str) -> dict[str, str]:
    """Per trace, the node its task ran on, from the progress lines (the node each task reported)."""
    lines = re.findall(r"ranks analysed (\d+)/(\d+) \(last: (\S+) on (node-\w)", stderr)
    return {Path(path).name: node for _, _, path, node in lines}


def test_each_rank_runs_on_its_node_and_the_document_is_the_local_one(cluster, tmp_path):
    ray, folders = cluster
    local = run_cli("report", "--json", str(folders["node-a"]), str(folders["node-b"]))
    assert local.returncode == 0, local.stderr
    out = tmp_path / "ray.json"
    proc = on_ray(ray.address, "report", "--json", "-o", str(out), f"node-a:{folders['node-a']}", f"node-b:{folders['node-b']}")
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == local.stdout  # byte for byte: the cross-rank step, its peer waits included
    doc = json.loads(local.stdout)
    assert [r["rank"] for r in doc["ranks"]] == list(range(RANKS))
    assert doc["cross_rank"]["waits"] is not None  # the waits went back to each rank's node and were applied there
    ran = where_ran(proc.stderr)
    assert ran == {f"rank{r}.pt.trace.json.gz": "node-a" if r < 4 else "node-b" for r in range(RANKS)}
    assert f"ranks analysed {RANKS}/{RANKS}" in proc.stderr


@pytest.mark.parametrize("sample", ["afd-graphs-dbo", "afd-pair-graphs-nomps"])
def test_a_disaggregated_run_on_ray_is_the_local_one(cluster, tmp_path, sample):
    """samples/afd-graphs-dbo (an attention trace, the FFN's role declared, Python samples) and
    samples/afd-pair-graphs-nomps (both roles' traces, time-sliced): their roles, options and samples
    read where the bundle is, the FFN's trace cut to the attention's window, the document byte for
    byte the local one."""
    ray, _ = cluster
    bundle = tmp_path / sample
    shutil.copytree(SAMPLES / sample, bundle)
    local = run_cli("report", "--json", str(bundle))
    assert local.returncode == 0, local.stderr
    proc = on_ray(ray.address, "report", "--json", f"node-a:{bundle}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == local.stdout
    doc = json.loads(local.stdout)
    assert doc["ranks"][0]["role"] == "attention" and doc["roles"]["roles"] == ["attention", "ffn"]
    assert doc["ranks"][0]["host_stacks"]["window"]["samples"]
    if len(doc["ranks"]) == 2:
        assert doc["roles"]["ffn_window_restricted"] is True and doc["verdict"]["next_step"]["kind"] == "start_mps"


def test_a_glob_is_asked_of_every_node_and_each_file_read_once(cluster):
    ray, folders = cluster
    pattern = str(folders["node-a"].parent / "*" / "rank*.pt.trace.json.gz")
    proc = on_ray(ray.address, "report", "--json", pattern)
    assert proc.returncode == 0, proc.stderr
    files = sorted(folders["node-a"].parent.glob("*/rank*.pt.trace.json.gz"))
    local = run_cli("report", "--json", *map(str, files))
    assert proc.stdout == local.stdout  # the inputs named as the files found
    # Both nodes see the one filesystem here: each file is read once, the nodes sharing them
    ran = where_ran(proc.stderr)
    assert len(ran) == RANKS and set(ran.values()) == {"node-a", "node-b"}


def test_compare_with_ray_is_the_local_comparison(cluster):
    ray, folders = cluster
    arms = [f"node-a:{folders['node-a']}", f"node-b:{folders['node-b']}"]
    proc = on_ray(ray.address, "compare", "--json", *arms)
    assert proc.returncode == 0, proc.stderr
    local = run_cli("compare", "--json", str(folders["node-a"]), str(folders["node-b"]))
    assert proc.stdout == local.stdout


def test_a_link_out_of_the_paths_given_is_not_read(cluster, tmp_path):
    ray, folders = cluster
    mine = tmp_path / "mine"
    shutil.copytree(folders["node-a"], mine)
    outside = tmp_path / "elsewhere.pt.trace.json.gz"
    shutil.copy(folders["node-b"] / "rank4.pt.trace.json.gz", outside)
    (mine / "rank4.pt.trace.json.gz").symlink_to(outside)
    proc = on_ray(ray.address, "report", "--json", f"node-a:{mine}")
    assert proc.returncode == 0, proc.stderr
    assert f"{mine / 'rank4.pt.trace.json.gz'}: leads outside {mine}" in "\n".join(unwrapped(proc.stderr))
    assert [r["rank"] for r in json.loads(proc.stdout)["ranks"]] == [0, 1, 2, 3]


def test_bad_node_names_and_paths_are_one_line(cluster):
    ray, folders = cluster
    proc = on_ray(ray.address, "report", f"node-z:{folders['node-a']}")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "no node of the cluster is called node-z" in proc.stderr and "node-a" in proc.stderr
    proc = on_ray(ray.address, "report", f"node-b:{folders['node-b']}/nothing-here")
    assert proc.returncode == 2 and "nothing-here: no such file or directory (on node node-b" in proc.stderr


def test_a_killed_nodes_ranks_are_named_missing(cluster, tmp_path):
    """Node C holds ranks 4-7 and its tasks are slow to start: it is killed while they wait, after
    node A's ranks are done. The report comes out of node A's ranks, naming each of C's as missing;
    run again, C (now dead) is named so."""
    ray, folders = cluster
    ray.start("node-c", env=SLOW_LEASES)
    # Ctrl-C while node C's tasks wait: one line, exit 130, the tasks cancelled
    args = ["report", "--json", "--ray", ray.address, f"node-a:{folders['node-a']}", f"node-c:{folders['node-b']}"]
    proc = popen_interruptible(
        [sys.executable, "-m", "dbo_trace.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "ranks analysed 4/8" in line:
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, "".join(seen) + rest
    assert "dbo-trace: interrupted\n" in rest and "Traceback" not in rest and proc.stdout.read() == ""

    report = tmp_path / "report.json"
    args = [
        "report",
        "--json",
        "-o",
        str(report),
        "--ray",
        ray.address,
        f"node-a:{folders['node-a']}",
        f"node-c:{folders['node-b']}",
    ]
    proc = subprocess.Popen([sys.executable, "-m", "dbo_trace.cli", *args], stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:  # the progress: node A's four ranks, then C is killed
        lines.append(line)
        if "ranks analysed 4/8" in line:
            ray.kill("node-c")
            break
    lines += proc.stderr.readlines()
    assert proc.wait(timeout=180) == 0, "".join(lines)
    stderr = "\n".join(unwrapped("".join(lines)))
    doc = json.loads(report.read_text())
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3]
    for rank in range(4, 8):
        trace = folders["node-b"] / f"rank{rank}.pt.trace.json.gz"
        line = f"the rank in {trace} (node node-c"
        assert sum(line in w for w in doc["warnings"]) == 1  # named once, in the document
        assert re.search(re.escape(line) + r" \(\w+\)\): not analysed \(its node (left the cluster|died)\); missing", stderr)
    assert "ranks analysed 8/8" in stderr and "Traceback" not in stderr
    again = on_ray(ray.address, "report", "--json", f"node-a:{folders['node-a']}", f"node-c:{folders['node-b']}")
    assert again.returncode == 0, again.stderr
    assert f"node-c:{folders['node-b']}: no live node of the cluster is called node-c (1 dead; " in "\n".join(unwrapped(again.stderr))
    assert "the ranks there are missing from this report" in "\n".join(unwrapped(again.stderr))
    assert [r["rank"] for r in json.loads(again.stdout)["ranks"]] == [0, 1, 2, 3]


def test_a_node_lost_after_its_ranks_are_analysed_costs_only_their_peer_waits(cluster, tmp_path):
    """Node C holds ranks 4-7; it is killed once every rank is analysed, while its tasks for the peer
    waits wait for a worker (slow leases). The cross-rank parts came back with each rank's analysis:
    the view still holds all eight ranks, ranks 0-3 their peer waits, and each of C's ranks is named
    once: its waits not applied (an adversarial review found the view lost whole where the parts were
    asked for after settling)."""
    ray, folders = cluster
    ray.start("node-c", env=SLOW_LEASES)
    report = tmp_path / "report.json"
    args = ["report", "--json", "-o", str(report), "--ray", ray.address, f"node-a:{folders['node-a']}", f"node-c:{folders['node-b']}"]
    proc = subprocess.Popen([sys.executable, "-m", "dbo_trace.cli", *args], stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "ranks analysed 8/8" in line:
            time.sleep(2)  # the driver settles and asks C's node for the peer waits: its lease is slow
            ray.kill("node-c")
            break
    lines += proc.stderr.readlines()
    assert proc.wait(timeout=300) == 0, "".join(lines)
    doc = json.loads(report.read_text())
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))
    assert doc["cross_rank"] is not None and sorted(doc["cross_rank"]["ranks"]) == list(range(8))
    for rank in range(4, 8):
        said = [w for w in doc["warnings"] if w.startswith(f"rank {rank} on node node-c")]
        assert len(said) == 1 and "its waits for peer ranks were not applied" in said[0], doc["warnings"]
