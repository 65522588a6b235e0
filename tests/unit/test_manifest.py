"""The manifest decoded once by the bundle reader (bundle.py: Manifest): a real recording's fields
as its JSON holds them (read here with json alone), and a damaged manifest's wrong-typed fields
left out rather than passed on."""

from __future__ import annotations

import json

from conftest import SAMPLES

from dbo_trace.bundle import manifest_of, read_bundle, served_settings

PAIR = SAMPLES / "afd-pair-graphs-dbo"


def test_a_real_pair_s_manifest_is_typed_as_its_json_says():
    raw = json.loads((PAIR / "manifest.json").read_text())
    m = read_bundle(PAIR).manifest
    assert m.version == raw["version"] and m.status == raw["status"] and m.ended == raw["times"]["ended"]
    assert m.gpu_name == raw["gpus"]["names"][0]
    assert m.command == tuple(raw["command"]) and m.settings == raw["settings"] and m.load == raw["load"]
    assert m.afd == raw["afd"] and m.gpu_sharing == raw["gpu_sharing"] and m.gpu_count == len(raw["gpus"]["names"])
    assert set(m.roles) == set(raw["roles"]) == {"attention", "ffn"}
    for name, entry in raw["roles"].items():
        role = m.roles[name]
        assert role.traces == tuple(entry["traces"]) and role.peer is entry["peer"]
        assert role.command == tuple(entry["command"]) and role.settings == entry["settings"]
    assert m.repeats == raw["repeats"] and m.pystacks == raw["pystacks"]
    assert served_settings(m) == raw["settings"]


def test_wrong_types_are_left_out():
    m = manifest_of({
        "version": 1, "command": ["vllm", 3], "settings": "fast", "load": [16], "env": None,
        "roles": {"attention": "x", "ffn": {"traces": "t", "peer": "yes", "settings": {"dbo": {}}}, 7: {}},
        "afd": ["role"], "gpu_sharing": 1, "gpus": {"names": "H200"}, "status": 5, "times": {"ended": 1.5},
    })  # fmt: skip
    assert (m.command, m.settings, m.load, m.env, m.afd, m.gpu_sharing, m.gpu_count, m.gpu_name) == (None,) * 8
    assert (m.status, m.ended) == (None, None)
    assert manifest_of({"version": 1, "times": "late", "gpus": {"names": ["\x1b[2J", "H200"]}}).gpu_name is None
    assert set(m.roles) == {"attention", "ffn"}  # a role is a name: 7 is none
    assert m.roles["attention"].traces is None and m.roles["ffn"].traces is None and m.roles["ffn"].peer is False
    assert served_settings(m) is None  # the FFN's settings are not the served side's


def test_settings_from_an_older_manifest_s_command_line():
    """An older manifest without `settings`: the attention server's are parsed from its command line."""
    raw = json.loads((PAIR / "manifest.json").read_text())
    del raw["settings"]
    for entry in raw["roles"].values():
        del entry["settings"]
    m = manifest_of(raw)
    got = served_settings(m)
    assert got is not None and got == served_settings(manifest_of({"version": 1, "command": raw["command"]}))
    flags = raw["command"]
    assert ("--enable-dbo" in flags) is ("enable-dbo" in got["dbo"])


def test_amending_a_manifest_keeps_what_it_held(tmp_path):
    """The demo completes the manifest `record` wrote through the bundle module (amend_manifest), which
    keeps every other key and the format's own."""
    from dbo_trace.bundle import amend_manifest, read_bundle_manifest, write_manifest

    write_manifest(tmp_path, {"status": "complete", "times": {"ended": "2026-01-01T00:00:00+00:00"}, "layers": 2})
    amend_manifest(tmp_path, {"layers": 4, "created_by": "dbo-trace demo"})
    raw = json.loads((tmp_path / "manifest.json").read_text())
    assert raw == {"format": "dbo-trace-bundle", "version": 1, "status": "complete", "created_by": "dbo-trace demo",
                   "times": {"ended": "2026-01-01T00:00:00+00:00"}, "layers": 4}  # fmt: skip
    assert read_bundle_manifest(tmp_path).layers == 4
