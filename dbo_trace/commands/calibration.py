"""What `--what-if dbo=on|off` is calibrated on: recorded pairs of one model, GPU and transport
(analysis/afd/dbo_model.py). `--calibrate PATH` (a bundle or a load sweep's folder, repeatable)
measures them here, pairing arms by compare's rule; without it, the calibration measured on the
shipped H200 sweep (dbo_trace/data/afd-calibration.json, written by scripts/calibrate_afd.py)."""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from pathlib import Path

import msgspec

from dbo_trace.analysis.afd.dbo_model import ArmTerms, Calibration, CalibrationPair, terms_of
from dbo_trace.analysis.compare.arms import RanWith, load_differs, ran_with
from dbo_trace.analysis.compare.load_sweep import same_pairing
from dbo_trace.analysis.model import Options
from dbo_trace.bundle import BundleError, is_bundle, read_bundle_manifest
from dbo_trace.commands.common import analyzed, fail
from dbo_trace.sweep_folder import SweepError, is_sweep, read_sweep

DEFAULT_FILE = "afd-calibration.json"
MAX_CALIBRATION_BYTES = 1 << 20


def bundles_in(paths: tuple[Path, ...]) -> list[Path]:
    """Each PATH's recordings: a bundle itself, a sweep's profiled runs."""
    out: list[Path] = []
    for path in paths:
        if is_sweep(path):
            try:
                sweep = read_sweep(path)
            except SweepError as exc:
                fail(f"--calibrate {path}: {exc}")
            out += [r.bundle for r in sweep.runs if r.usable and r.profiled and r.bundle is not None]
        elif is_bundle(path):
            out.append(path)
        else:
            fail(f"--calibrate {path}: not a dbo-trace bundle or load sweep folder; give recordings of DBO on and off")
    return out


def arm_terms(bundle: Path) -> tuple[ArmTerms, RanWith] | None:
    """A recording's pipeline terms and what it ran with; None where it has no AFD pipeline."""
    try:
        manifest = read_bundle_manifest(bundle)
    except BundleError as exc:
        fail(f"--calibrate {bundle}: {exc}")
    report = analyzed([bundle], Options(), arm=str(bundle))
    pipeline = report.pipeline
    if pipeline is None:
        return None
    terms = terms_of(pipeline, str(bundle), report.recording.gpu_name, pipeline.recording)
    if terms is None:
        return None
    return replace(terms, graph_sizes=report.recording.graph_sizes), ran_with(report, manifest.settings, manifest.load)


def calibration_of(paths: tuple[Path, ...]) -> Calibration:
    """The pairs in the recordings: each DBO arm with the first DBO-off arm of the same load, cudagraph
    mode and GPU sharing (compare's rule)."""
    arms = [found for b in bundles_in(paths) if (found := arm_terms(b)) is not None]
    pairs = []
    for on, with_on in arms:
        if not on.dbo:
            continue
        fits = [off for off, w in arms if not off.dbo and same_pairing(with_on, w) and not load_differs(with_on.load, w.load)]
        if fits:
            pairs.append(CalibrationPair(off=fits[0], on=on))
    if not pairs:
        named = ", ".join(str(p) for p in paths)
        fail(f"--calibrate {named}: no AFD pair of DBO on and off at one load was found there; give both arms' recordings")
    return Calibration(tuple(pairs), source=f"calibrated on {len(pairs)} recorded pair{'s' if len(pairs) > 1 else ''} given")


def default_calibration() -> Calibration:
    """The shipped calibration (the H200 sweep at 16, 32 and 64 in flight)."""
    try:
        data = resources.files("dbo_trace.data").joinpath(DEFAULT_FILE).read_bytes()
        found = msgspec.json.decode(data[:MAX_CALIBRATION_BYTES], type=Calibration)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        fail(f"dbo-trace's shipped calibration (dbo_trace/data/{DEFAULT_FILE}) cannot be read ({exc}): reinstall "
             "dbo-trace, or give --calibrate with your own recorded pairs")  # fmt: skip
    return replace(found, default=True)


def encode(calibration: Calibration) -> bytes:
    return msgspec.json.format(msgspec.json.encode(calibration), indent=1) + b"\n"


def with_calibration(options: Options, calibrate: tuple[Path, ...]) -> Options:
    """The options with what --what-if dbo is calibrated on, where it was asked for."""
    if options.what_if_dbo is None:
        return options
    return replace(options, calibration=calibration_of(calibrate) if calibrate else default_calibration())
