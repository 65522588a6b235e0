"""One discovery type for every executor (issue 60): a Ray node's find() and the local discover() give
the same Found, each trace an Input with its role's claim, and what several nodes found is merged
by a function of that type (a file on a shared filesystem read once, by the least-loaded node)."""

import os
from dataclasses import replace
from pathlib import Path

from conftest import SAMPLES

from dbo_trace.app.ray_executor import find
from dbo_trace.bundle import RoleClaims
from dbo_trace.trace.load import Found, Input, discover, merged, read_logs_and_samples

PAIR = SAMPLES / "afd-eager"  # a bundle with its peer: an attention and an FFN trace, event logs, Python samples


def test_a_ray_node_finds_what_discover_finds_here():
    local = read_logs_and_samples(discover([PAIR]))
    node, errors, roots = find([(0, str(PAIR), True)], "node-a")
    assert type(node) is Found and errors == [] and roots == [os.path.realpath(PAIR)]
    assert [i.node for i in node.inputs] == ["node-a"] * len(local.inputs)
    assert [replace(i, node=None) for i in node.inputs] == sorted(local.inputs, key=lambda i: i.path)  # merged: by path
    claims = {i.claims for i in local.inputs}
    assert RoleClaims(manifest="attention") in claims and RoleClaims(manifest="ffn") in claims
    assert node.claims() == local.claims() and len(local.claims()) == 2
    assert node.manifests == local.manifests
    assert len(node.event_logs) == len(local.event_logs) > 0 and len(node.samples) == len(local.samples) > 0
    assert node.warnings == local.warnings + local.read_warnings and node.read_warnings == []
    assert node.logs == [] and node.pystacks == []  # read where they are


def test_the_index_of_the_path_given_is_each_input_s():
    found = discover([SAMPLES / "overlap", SAMPLES / "serial"])
    assert {i.given for i in found.inputs if SAMPLES / "serial" in i.path.parents} == {1}
    assert {i.given for i in found.inputs if SAMPLES / "overlap" in i.path.parents} == {0}
    assert all(i.size == os.path.getsize(i.path) and i.node is None for i in found.inputs)


def test_a_file_given_by_itself_and_in_its_bundle_keeps_its_bundle_s_claim():
    (attention,) = [i for i in discover([PAIR]).inputs if i.claims == RoleClaims(manifest="attention")]
    found = discover([attention.path, PAIR])
    assert found.inputs[0] == replace(attention, given=0)
    assert "a trace was given both by itself and inside a folder or bundle; read once" in found.warnings


def test_one_file_found_by_several_nodes_is_read_once_by_the_least_loaded():
    def at(node: str, name: str, mtime: int = 1) -> Input:
        return Input(Path("/shared") / name, 0, node, 10, mtime)

    a = Found([at("a", "x"), at("a", "y"), at("a", "z", mtime=2)], warnings=["wa"])
    b = Found([at("b", "x"), at("b", "y"), at("b", "z", mtime=3)], warnings=["wb"])
    out = merged([a, b])
    # x and y are one file each (one path, size and time): x to a, then y to b (a has one); z differs: two files
    assert [(i.path.name, i.node, i.mtime_ns) for i in out.inputs] == [("x", "a", 1), ("y", "b", 1), ("z", "a", 2), ("z", "b", 3)]
    assert out.warnings == ["wa", "wb"]


def test_a_ray_node_refuses_a_link_out_of_the_path_given(tmp_path):
    (tmp_path / "inside").mkdir()
    outside = tmp_path / "elsewhere.pt.trace.json"
    outside.write_text("{}")
    (tmp_path / "inside" / "a.pt.trace.json").write_text("{}")
    (tmp_path / "inside" / "b.pt.trace.json").symlink_to(outside)
    node, errors, _ = find([(0, str(tmp_path / "inside"), True)], "n")
    assert [i.path.name for i in node.inputs] == ["a.pt.trace.json"] and errors == []
    link, given = tmp_path / "inside" / "b.pt.trace.json", tmp_path / "inside"
    assert node.warnings == [f"{link}: leads outside {given} (a symbolic link?); not read"]
