"""`dbo-trace doctor`: what this Python would record with, checked without patching anything."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from dataclasses import dataclass

from dbo_trace.record import environment

PLUGIN_GROUP = "vllm.general_plugins"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: informational
    detail: str


def _plugin_registered() -> Check:
    try:
        eps = importlib.metadata.entry_points(group=PLUGIN_GROUP)
    except Exception as exc:  # pragma: no cover - broken metadata
        return Check("plugin entry point", False, f"cannot read entry points: {exc}")
    ours = [ep for ep in eps if ep.value.startswith("dbo_trace.")]
    if not ours:
        return Check(
            "plugin entry point", False, f"no {PLUGIN_GROUP} entry point for dbo_trace: reinstall dbo-trace in this Python"
        )
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and ours[0].name not in allowed.split(","):
        return Check(
            "plugin entry point", False, f"VLLM_PLUGINS={allowed!r} excludes {ours[0].name!r} (dbo-trace record adds it)"
        )
    return Check("plugin entry point", True, f"{PLUGIN_GROUP}: {ours[0].name} = {ours[0].value}")


def _all_threads() -> Check:
    try:
        import torch
    except Exception:
        return Check("profile_all_threads", None, "torch is not installed here")
    from dbo_trace.record.vllm_targets import all_threads_config

    if all_threads_config(torch) is None:
        return Check(
            "profile_all_threads", False, f"torch {torch.__version__} lacks it: the event log alone attributes microbatch threads"
        )
    return Check("profile_all_threads", True, f"torch {torch.__version__} supports it; recordings turn it on")


def _targets() -> list[Check]:
    from dbo_trace.record.vllm_targets import OPTIONAL_TARGETS, targets_for, vllm_version

    version = vllm_version()  # the import, not the metadata: a source checkout on PYTHONPATH counts
    if version is None:
        # record runs `vllm serve` with the plugin in it: without vLLM there is nothing to record (report needs none)
        needed = "dbo-trace record needs it in the server's Python; report works without it"
        return [Check("vLLM targets", False, f"vLLM is not installed here (`import vllm` fails): {needed}")]
    targets, known = targets_for(version)
    checks = []
    if not known:
        checks.append(Check("vLLM version", False, f"{version} is not in the tested table; the newest entry's targets are tried"))
    for target in targets:
        try:
            target.resolve()
            checks.append(Check(target.name, True, "would be instrumented"))
        except Exception as exc:
            optional = target.name in OPTIONAL_TARGETS
            checks.append(
                Check(
                    target.name,
                    None if optional else False,
                    ("optional, absent" if optional else "missing") + f" ({type(exc).__name__}: {exc})"[:160],
                )
            )
    return checks


def diagnose() -> tuple[dict, list[Check]]:
    versions = environment.versions()
    return versions, [_plugin_registered(), _all_threads(), *_targets()]
