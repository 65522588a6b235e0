"""The one atomic writer: no fixed temporary name (a planted symlink is not followed, a user's
`.tmp` file is not overwritten), nothing left behind on failure."""

import os

import pytest

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
