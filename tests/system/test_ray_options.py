"""`--ray`'s refusals and its one line where Ray is not installed: no cluster needed, so these run
everywhere (tests/system/test_ray.py starts the cluster)."""

import os
import subprocess
import sys

from conftest import run_cli


def test_without_ray_the_option_says_what_to_install(tmp_path):
    (tmp_path / "ray.py").write_text("raise ImportError('no ray here')\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-m", "dbo_trace.cli", "report", "--ray", "127.0.0.1:1", "node-a:/x"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2
    assert proc.stderr == "dbo-trace: error: --ray needs Ray on this machine and on every node: pip install 'dbo-trace[ray]'\n"


def test_pictures_and_workers_are_refused_with_ray(tmp_path):
    for extra in (["--timeline", str(tmp_path / "t.png")], ["--html", str(tmp_path / "r.html")], ["--workers", "2"]):
        proc = run_cli("report", "--ray", "127.0.0.1:1", *extra, "node-a:/x")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr


def test_parse_node_and_path():
    from dbo_trace.app.ray_executor import parse

    assert (parse("node-a:/data/run").node, parse("node-a:/data/run").path) == ("node-a", "/data/run")
    assert (parse("10.0.0.5:/data/run").node, parse("10.0.0.5:/data/run").path) == ("10.0.0.5", "/data/run")
    assert parse("/data/a:/b").node is None  # a colon inside a path is the path's
    assert parse("/data/*.json.gz") == parse("/data/*.json.gz") and parse("/data/*.json.gz").node is None


def test_a_node_is_named_by_its_id_address_or_own_resource():
    from dbo_trace.app.ray_executor import parse, resolve

    def node(ident, resource):
        resources = {"CPU": 8.0, "node:10.0.0.5": 1.0, resource: 1.0}
        return {"NodeID": ident, "NodeManagerAddress": "10.0.0.5", "NodeManagerHostname": "h", "Resources": resources}

    a, b = node("aa" * 28, "node-a"), node("bb" * 28, "node-b")
    assert resolve(parse("node-b:/x"), [a, b], []) == [b]
    assert resolve(parse(f"{'aa' * 28}:/x"), [a, b], []) == [a]
    assert resolve(parse("10.0.0.5:/x"), [a, b], []) == (
        "10.0.0.5:/x: 10.0.0.5 names 2 nodes (node-a (aaaaaaaa), node-b (bbbbbbbb)); "
        "name one by its node id or a resource only it has"
    )
    assert resolve(parse("CPU:/x"), [a, b], []).startswith("CPU:/x: no node of the cluster is called CPU")
    assert resolve(parse("/x"), [a, b], []) == [a, b]  # asked of every node
