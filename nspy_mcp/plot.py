"""`nspy-mcp plot`: a PNG of speedup per candidate and config, with 95 % CI bars, for people.

It reads a stored result (the same store the server writes) and draws, per metric, one
group of bars per config and one bar per candidate; the whiskers are the paired-run 95 %
interval, the line at 1.0 is the reference, and a hatched bar is one whose interval
includes 1.0 (not resolvable: noise). Candidates without a speedup (failed, incorrect, no
valid pairs) are listed under the chart with the reason. A result profiled with
``diagnose`` gets a last panel: each call's compute, memory and DRAM throughput as a
percentage of peak, with its bound. matplotlib is the optional extra 'plot'.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nsight_core.diagnosis import Diagnosis
from nsight_core.errors import NsightCoreError
from nsight_core.plan.config import EngineConfig
from nsight_core.results import Comparison, ProfileResult
from nsight_core.store.result_store import CorruptResultError, ResultStore, default_store_root


def _label(params: dict[str, Any]) -> str:
    return "\n".join(f"{k}={v}" for k, v in params.items()) or "config"


_METRIC_TITLES = {
    "events__time_duration": "time per call",
    "gpu__time_duration.sum": "GPU time per call",
    "gpu__time_duration": "GPU time per call",
}


def metric_title(metric: str, backend: str | None) -> str:
    """A panel title for people: 'time per call (events backend)', not the raw metric name."""
    what = _METRIC_TITLES.get(metric, metric)
    return f"{what} ({backend} backend)" if backend else what


def _not_drawn(comp: Comparison) -> str:
    params = ", ".join(f"{k}={v}" for k, v in comp.Params.items()) or f"config {comp.ConfigId}"
    why = "; ".join(comp.Reasons) or "no valid run pairs"
    return f"{comp.Annotation} @ {params}: {why}"


def draw_speedups(result: ProfileResult, output: Path) -> Path:
    """Write the speedup chart of `result` to `output` (PNG); needs matplotlib."""
    import matplotlib.pyplot as plt

    fig = speedup_figure(result)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return output


def speedup_figure(result: ProfileResult) -> Any:
    """The speedup chart as a matplotlib Figure (the caller saves and closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    by_metric: dict[str, list[Comparison]] = defaultdict(list)
    missing: list[str] = []
    for comp in result.comparisons:
        if comp.Speedup is not None:
            by_metric[comp.Metric].append(comp)
        else:
            missing.append(_not_drawn(comp))
    if not by_metric:
        raise ValueError(
            f"result {result.result_id} has no speedups to plot "
            f"(status {result.status}; comparisons need a timed candidate and reference)"
        )
    diagnosed = [d for d in result.diagnoses if d.ComputeThroughputPct is not None]
    panels = len(by_metric) + (1 if diagnosed else 0)
    fig, axes = plt.subplots(panels, 1, figsize=(9, 4 * panels), squeeze=False)
    if diagnosed:
        draw_peak_panel(axes[-1, 0], diagnosed)
    for ax, (metric, comps) in zip(axes[:, 0], sorted(by_metric.items()), strict=False):
        configs = sorted({c.ConfigId for c in comps})
        params = {c.ConfigId: c.Params for c in comps}
        candidates = sorted({c.Annotation for c in comps})
        width = 0.8 / len(candidates)
        for i, cand in enumerate(candidates):
            mine = {c.ConfigId: c for c in comps if c.Annotation == cand}
            xs, ys, lo, hi, hatch = [], [], [], [], []
            for j, cid in enumerate(configs):
                c = mine.get(cid)
                if c is None or c.Speedup is None:
                    continue
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(c.Speedup)
                lo.append(c.Speedup - (c.Speedup_CI95_Lower or c.Speedup))
                hi.append((c.Speedup_CI95_Upper or c.Speedup) - c.Speedup)
                hatch.append(not c.Resolvable)
            bars = ax.bar(xs, ys, width, yerr=[lo, hi], capsize=4, color=f"C{i}")
            for bar, unresolved in zip(bars, hatch, strict=True):
                if unresolved:
                    bar.set_hatch("//")
                    bar.set_alpha(0.5)
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        ax.set_xticks(range(len(configs)), [_label(params[cid]) for cid in configs])
        baseline = comps[0].Baseline
        ax.set_ylabel(f"speedup over {baseline}")
        ax.set_title(metric_title(metric, result.provenance.backend if result.provenance else None))
        # Plain patches: a legend copied from a hatched first bar would suggest all are.
        handles = [Patch(color=f"C{i}", label=cand) for i, cand in enumerate(candidates)]
        ax.legend(handles=handles, fontsize="small")
    fig.suptitle(f"{result.result_id}: hatched = CI includes 1.0 (not resolvable)")
    fig.tight_layout()
    if missing:
        # A failed candidate has no bar; say so, or its absence reads as "not requested".
        shown = missing[:8] + ([f"and {len(missing) - 8} more"] if len(missing) > 8 else [])
        fig.text(
            0.01, 0.0, "not drawn (no speedup):\n" + "\n".join(shown),
            fontsize="x-small", ha="left", va="top",
        )  # fmt: skip
    return fig


PEAK_BARS = (
    ("ComputeThroughputPct", "compute (SM)"),
    ("MemoryThroughputPct", "memory (busiest unit)"),
    ("DramPct", "DRAM bandwidth"),
)


def draw_peak_panel(ax: Any, diagnoses: Sequence[Diagnosis]) -> None:
    """The second panel with ``diagnose``: each call's speed of light, % of peak."""
    labels = [f"{d.Annotation}\n{_label(d.Params)}" for d in diagnoses]
    width = 0.8 / len(PEAK_BARS)
    for i, (field, name) in enumerate(PEAK_BARS):
        ys = [getattr(d, field) or 0.0 for d in diagnoses]
        xs = [j - 0.4 + width * (i + 0.5) for j in range(len(diagnoses))]
        ax.bar(xs, ys, width, color=f"C{i}", label=name)
    for j, d in enumerate(diagnoses):
        ax.text(j, 102, d.Bound or "?", ha="center", fontsize="x-small")
    ax.axhline(60.0, color="grey", linewidth=1, linestyle=":")  # diagnose.BOUND_PCT
    ax.set_ylim(0, 110)
    ax.set_xticks(range(len(diagnoses)), labels, fontsize="x-small")
    ax.set_ylabel("% of peak")
    ax.set_title("speed of light (ncu, medians); dotted: 60 % line, below both = latency-bound")
    ax.legend(fontsize="small")


def run_plot(result_id: str, *, output: str | None, store: str | None, config: EngineConfig) -> int:
    """The CLI command: 0 on success, 2 when the result or matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.stderr.write(
            "nspy-mcp plot needs matplotlib: pip install 'nspy-mcp[plot]' (or pip install matplotlib)\n"
        )
        return 2
    try:
        root = store if store is not None else default_store_root(config)
        result = ResultStore(root).load(result_id)
        path = draw_speedups(result, Path(output or f"{result_id}.png"))
    except NsightCoreError as err:
        sys.stderr.write(f"nspy-mcp plot: {err.error_class.value}: {err}\n")
        return 2
    except (CorruptResultError, ValueError) as err:
        sys.stderr.write(f"nspy-mcp plot: {err}\n")
        return 2
    sys.stdout.write(f"wrote {path}\n")
    return 0
