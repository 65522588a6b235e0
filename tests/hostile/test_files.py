"""The one atomic writer: no fixed temporary name (a planted symlink is not followed, a user's
`.tmp` file is not overwritten), nothing left behind on failure; and its exclusive twin, which never
replaces a file that appeared after the caller checked."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT, SAMPLES, sample_trace

from dbo_trace.files import replace_file


def test_a_planted_tmp_symlink_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "out.md.tmp").symlink_to(victim)
    replace_file(tmp_path / "out.md", b"report")
    assert victim.read_text() == "precious"
    assert (tmp_path / "out.md").read_bytes() == b"report"
    assert (tmp_path / "out.md.tmp").is_symlink()


def test_a_users_tmp_file_is_left_alone(tmp_path):
    (tmp_path / "r.md.tmp").write_text("mine")
    replace_file(tmp_path / "r.md", b"new")
    assert (tmp_path / "r.md.tmp").read_text() == "mine"


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    target = tmp_path / "adir"
    target.mkdir()  # renaming a file over a folder fails
    with pytest.raises(OSError):
        replace_file(target, b"x")
    assert os.listdir(tmp_path) == ["adir"] and os.listdir(target) == []


def test_create_file_never_replaces_what_appeared_meanwhile(tmp_path):
    from dbo_trace.files import create_file

    (tmp_path / "out.md").write_text("theirs")
    with pytest.raises(FileExistsError):
        create_file(tmp_path / "out.md", b"ours")
    assert (tmp_path / "out.md").read_text() == "theirs"
    victim = tmp_path / "victim"
    (tmp_path / "link.md").symlink_to(victim)  # dangling: a create through it would make the victim
    with pytest.raises(FileExistsError):
        create_file(tmp_path / "link.md", b"ours")
    assert not victim.exists()
    create_file(tmp_path / "new.md", b"ours")
    assert (tmp_path / "new.md").read_bytes() == b"ours"
    assert sorted(os.listdir(tmp_path)) == ["link.md", "new.md", "out.md"]  # no temporary file left


def test_create_file_without_hard_links_still_refuses_and_writes(tmp_path, monkeypatch):
    """A filesystem without hard links (FAT): the name is reserved exclusively, then renamed over."""
    import errno

    from dbo_trace.files import create_file

    def no_links(*a, **k):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    create_file(tmp_path / "a.md", b"ours")
    assert (tmp_path / "a.md").read_bytes() == b"ours"
    with pytest.raises(FileExistsError):
        create_file(tmp_path / "a.md", b"again")
    assert (tmp_path / "a.md").read_bytes() == b"ours" and os.listdir(tmp_path) == ["a.md"]


def _report_while_another_writes(out, *options, command=("report", "--markdown")):
    """`report -o out` whose analysis, like a second report's finishing first, ends with out written."""
    trace = str(sample_trace("overlap")) if command[0] == "report" else str(SAMPLES / "overlap")
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from dbo_trace import cli\n"
        "from dbo_trace.commands import common\n"
        "real = common.analyzed\n"
        "def analyzed(*a, **k):\n"
        "    result = real(*a, **k)\n"
        f"    Path({str(out)!r}).write_text('theirs')\n"
        "    return result\n"
        "common.analyzed = analyzed\n"
        f"sys.argv = ['dbo-trace', *{list(command)!r}, '-o', {str(out)!r}, {trace!r}, *{list(options)!r}]\n"
        "cli.run()\n"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_an_output_written_during_the_report_is_not_replaced(tmp_path):
    """The no-overwrite check runs before the work; an output another process wrote since is kept
    (before: silently replaced), in one line, exit 2; --force still replaces it."""
    out = tmp_path / "same.md"
    proc = _report_while_another_writes(out)
    assert proc.returncode == 2, proc.stderr
    assert "nothing was replaced" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert out.read_text() == "theirs" and os.listdir(tmp_path) == ["same.md"]
    out.unlink()
    proc = _report_while_another_writes(out, "--force")
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("### dbo-trace: ")


def test_an_archive_written_during_the_work_is_not_replaced(tmp_path):
    out = tmp_path / "run.tar.gz"
    proc = _report_while_another_writes(out, command=("archive",))
    assert proc.returncode == 2, proc.stderr
    assert "not replaced" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert out.read_text() == "theirs" and os.listdir(tmp_path) == ["run.tar.gz"]
    proc = _report_while_another_writes(out, "--force", command=("archive",))
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:2] == b"\x1f\x8b"  # a gzip archive replaced it, as asked


def test_two_reports_to_one_output_at_once_one_wins(tmp_path):
    """Two `report -o same.md` started together: exactly one writes it, the other is refused."""
    out = tmp_path / "same.md"
    argv = [sys.executable, "-m", "dbo_trace.cli", "report", "--markdown", "-o", str(out), str(sample_trace("overlap"))]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert sorted(code for code, _ in results) == [0, 2], results
    assert any("already exists" in err for code, err in results if code == 2)
    assert os.listdir(tmp_path) == ["same.md"]
