"""`--ray`'s refusals and its one line where Ray is not installed: no cluster needed, so these run
everywhere (tests/test_ray.py starts the cluster)."""

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
