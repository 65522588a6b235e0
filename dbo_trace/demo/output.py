"""Tables for `dbo-trace demo`: the verdicts beside the truth, and the sweep. Plain text that also reads as Markdown."""

from __future__ import annotations

from dbo_trace.demo.run import PAYS_AT_LEAST, ModeResult, sweep_verdicts
from dbo_trace.render.format import aligned_table, pct


def _step_us(r: ModeResult) -> float | None:
    return r.workload.get("unprofiled_step_us", {}).get("median")


def paid_line(results: list[ModeResult]) -> str | None:
    """Whether DBO paid: each DBO mode's unprofiled step against the serial one. Overlap is not success
    by itself: on two GPUs NCCL's kernels waited for their peer and the overlapped step was slower."""
    serial = next((_step_us(r) for r in results if r.mode == "serial" and _step_us(r)), None)
    if serial is None:
        return None
    parts = []
    for r in results:
        step = _step_us(r)
        if r.mode in ("overlap", "graph") and step:
            change = step / serial - 1.0
            verdict = "paid" if change <= -PAYS_AT_LEAST else "did NOT pay" if change >= PAYS_AT_LEAST else "within noise"
            hidden = r.report.total.comm_hidden_fraction if r.report else None
            parts.append(
                f"{r.mode}: {step / 1000:.2f} ms against {serial / 1000:.2f} ms serial ({100 * change:+.0f}%), DBO {verdict}"
                + (f" with {pct(hidden)} of comm hidden" if hidden is not None and verdict != "paid" else "")
            )
    return "DBO against serial microbatches: " + "; ".join(parts) if parts else None


def demo_table(results: list[ModeResult]) -> str:
    rows = []
    for r in results:
        t = r.report.total if r.report else None
        step = r.workload.get("unprofiled_step_us", {}).get("median")
        verdict = "ERROR" if r.error else ("ok" if r.ok else "WRONG") if r.checked else "ran (CPU: not diagnosed)"
        rows.append(
            [
                r.mode,
                r.expected,
                r.got or "-",
                verdict,
                "-" if step is None else f"{step / 1000:.2f} ms",
                pct(t.comm_hidden_fraction) if t else "-",
                pct(t.host_idle_fraction) if t else "-",
                pct(t.replayed_kernel_fraction) if t else "-",
                str(r.bundle),
            ]
        )
    out = aligned_table(
        ["mode", "expected", "diagnosed", "", "step (unprofiled)", "comm hidden", "host idle", "graph replayed", "bundle"], rows
    )
    paid = paid_line(results)
    if paid:
        out += f"\n{paid}\n"
    for r in results:
        if r.error:
            out += f"\n{r.mode}: {r.error}\n"
    return out


def sweep_table(rows: list[dict]) -> str:
    body = []
    for row in rows:
        judged = sweep_verdicts(row)
        body.append(
            [
                f"{row['compute_us']:.0f}",
                f"{row['comm_us']:.0f}",
                f"{row['serial_step_us'] / 1000:.2f}",
                f"{row['dbo_step_us'] / 1000:.2f}",
                f"{100 * judged['gain']:+.0f}%",
                "yes" if judged["pays"] else "no",
                "-" if row["ratio"] is None else f"{row['ratio']:.2f}",
                "-" if judged["predicted"] is None else ("yes" if judged["predicted"] else "no"),
                "-" if judged["agree"] is None else ("yes" if judged["agree"] else "NO"),
            ]
        )
    agree = [sweep_verdicts(r)["agree"] for r in rows if sweep_verdicts(r)["agree"] is not None]
    summary = (
        (
            f"\nratio >= 1 matched 'DBO pays' at {sum(agree)} of {len(agree)} points: the ratio says whether a "
            "round trip can hide entirely, not whether DBO pays (docs/analysis.md).\n"
        )
        if agree
        else ""
    )
    return (
        aligned_table(
            [
                "compute us",
                "comm us",
                "serial ms",
                "DBO ms",
                "DBO gain",
                "DBO pays",
                "compute/comm per round trip",
                "ratio >= 1",
                "same as 'pays'",
            ],
            body,
        )
        + summary
    )
