"""The demo sweep as a picture: DBO's gain over serial per grid point, and where the criterion says it pays."""

from __future__ import annotations

import io

from dbo_trace.demo.run import sweep_verdicts


def draw_sweep(rows: list[dict]) -> bytes:
    """The grid as PNG bytes; writing it is the caller's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    computes = sorted({r["compute_us"] for r in rows})
    comms = sorted({r["comm_us"] for r in rows})
    fig, ax = plt.subplots(figsize=(7, 5), dpi=110)
    grid = [[None] * len(computes) for _ in comms]
    for r in rows:
        grid[comms.index(r["comm_us"])][computes.index(r["compute_us"])] = 100 * sweep_verdicts(r)["gain"]
    image = ax.imshow(
        [[g if g is not None else 0 for g in row] for row in grid],
        origin="lower",
        cmap="RdYlGn",
        vmin=-30,
        vmax=30,
        aspect="auto",
    )
    for r in rows:
        judged = sweep_verdicts(r)
        x, y = computes.index(r["compute_us"]), comms.index(r["comm_us"])
        mark = "" if judged["predicted"] is None else ("✓" if judged["agree"] else "✗")
        ax.text(
            x,
            y,
            f"{100 * judged['gain']:+.0f}%\n{mark} ratio {r['ratio']:.2f}"
            if r["ratio"] is not None
            else f"{100 * judged['gain']:+.0f}%",
            ha="center",
            va="center",
            fontsize=8,
        )
    ax.set_xticks(range(len(computes)), [f"{c:.0f}" for c in computes])
    ax.set_yticks(range(len(comms)), [f"{c:.0f}" for c in comms])
    ax.set_xlabel("compute phase (us)")
    ax.set_ylabel("dispatch / combine (us)")
    ax.set_title("DBO step-time gain over serial microbatches\n✓/✗: the report's criterion (ratio >= 1 pays) agrees / disagrees")
    fig.colorbar(image, ax=ax, label="gain (%)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
