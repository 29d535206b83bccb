"""``nsight.analyze``: `kernel`, `plot` and `ignore_failures`, under Nsight Python's names.

``import nsight_core as nsight`` then ``@nsight.analyze.plot(...)`` over
``@nsight.analyze.kernel(...)`` works as in Nsight Python. `plot` draws with matplotlib
(the optional extra ``plot``), imported only when a plot is drawn. Unlike Nsight Python,
a plotting error never loses the profile: the `ProfileResults` ride on the exception as
``err.results``, and failed points are named on the figure instead of vanishing.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsight_core.nsight.api import ProfileResults, ignore_failures, kernel
from nsight_core.results import Row

_PLOT_TYPES = ("line", "bar")
_AGGREGATES = (None, "avg", "geomean")


@dataclass(frozen=True)
class PlotOptions:
    """Nsight Python's plot parameters (docs/api.md lists them)."""

    filename: str = "plot.png"
    metric: str | None = None
    title: str = "Nsight Analyze Kernel Plot Results"
    ylabel: str | None = None
    annotate_points: bool = False
    show_aggregate: str | None = None
    plot_type: str = "line"
    plot_width: float = 6
    plot_height: float = 4
    row_panels: Sequence[str] | None = None
    col_panels: Sequence[str] | None = None
    x_keys: Sequence[str] | None = None
    print_data: bool = False
    variant_fields: Sequence[str] | None = None
    variant_annotations: Sequence[str] | None = None
    plot_callback: Callable[[Any], None] | None = None

    def check(self) -> None:
        if self.plot_type not in _PLOT_TYPES:
            raise ValueError(f"Invalid plot_type {self.plot_type!r}. Expected 'line' or 'bar'.")
        if self.show_aggregate not in _AGGREGATES:
            raise ValueError(
                f"Invalid show_aggregate {self.show_aggregate!r}. Expected None, 'avg' or 'geomean'."
            )


def plot(
    filename: str = "plot.png",
    metric: str | None = None,
    *,
    title: str = "Nsight Analyze Kernel Plot Results",
    ylabel: str | None = None,
    annotate_points: bool = False,
    show_aggregate: str | None = None,
    plot_type: str = "line",
    plot_width: float = 6,
    plot_height: float = 4,
    row_panels: Sequence[str] | None = None,
    col_panels: Sequence[str] | None = None,
    x_keys: Sequence[str] | None = None,
    print_data: bool = False,
    variant_fields: Sequence[str] | None = None,
    variant_annotations: Sequence[str] | None = None,
    plot_callback: Callable[[Any], None] | None = None,
) -> Callable[[Callable[..., ProfileResults]], Callable[..., ProfileResults]]:
    """Decorate a ``@kernel`` function: after each call, draw its rows to ``filename``.

    Options are checked here, at decoration time. The call returns the same
    `ProfileResults`; see `draw` for what is drawn.
    """
    options = PlotOptions(
        filename, metric, title, ylabel, annotate_points, show_aggregate, plot_type,
        plot_width, plot_height, row_panels, col_panels, x_keys, print_data, variant_fields,
        variant_annotations, plot_callback,
    )  # fmt: skip
    options.check()

    def decorate(func: Callable[..., ProfileResults]) -> Callable[..., ProfileResults]:
        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> ProfileResults:
            results = func(*args, **kwargs)
            try:
                draw(results, options)
            except ValueError as err:
                err.results = results  # type: ignore[attr-defined]
                raise
            return results

        return wrapped

    return decorate


def _pick_metric(rows: Sequence[Row], metric: str | None) -> str:
    found = list(dict.fromkeys(r.Metric for r in rows))
    if metric is None:
        if len(found) > 1:
            raise ValueError(
                f"Cannot visualize multiple metrics ({len(found)} > 1) with the "
                "@nsight.analyze.plot decorator. Please specify a metric to plot. "
                f"The metrics found are: {found}"
            )
        if not found:
            raise ValueError("Nothing to plot: the profile results have no rows.")
        return found[0]
    if metric not in found:
        raise ValueError(
            f"Metric {metric!r} not found in the profile results. The metrics found are: {found}"
        )
    return metric


def _label(values: dict[str, Any], keys: Sequence[str]) -> str:
    return ", ".join(f"{k}={values[k]}" for k in keys) or "config"


def _aggregate(values: Sequence[float], how: str) -> float | None:
    if not values:
        return None
    if how == "avg":
        return sum(values) / len(values)
    if any(v <= 0 for v in values):
        return None  # a geometric mean of non-positive values is undefined, not -inf
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _series_name(row: Row, params: dict[str, Any], options: PlotOptions) -> str:
    fields = list(options.variant_fields or [])
    split = fields and (
        options.variant_annotations is None or row.Annotation in options.variant_annotations
    )
    if not split:
        return row.Annotation
    return f"{row.Annotation} ({_label(params, fields)})"


def draw(results: ProfileResults, options: PlotOptions | None = None) -> Path:
    """Draw one metric of ``results``: per panel, one line (or bar group) per annotation over
    the configs, whiskers at the 95 % CI; failed points are listed under the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    opts = options or PlotOptions()
    rows = results.rows
    metric = _pick_metric(rows, opts.metric)
    rows = [r for r in rows if r.Metric == metric]
    if opts.print_data:
        frame = results.to_dataframe()
        sys.stderr.write(frame[frame["Metric"] == metric].to_string() + "\n")
    names = list(results.params_of(rows[0])) if rows else []
    panel_keys = [*(opts.row_panels or []), *(opts.col_panels or [])]
    for key in [*panel_keys, *(opts.x_keys or []), *(opts.variant_fields or [])]:
        if key not in names:
            raise ValueError(f"{key!r} is not a parameter of the function; parameters: {names}")
    x_keys = list(opts.x_keys) if opts.x_keys is not None else [
        n for n in names if n not in panel_keys and n not in (opts.variant_fields or [])
    ]  # fmt: skip

    def values_of(keys: Sequence[str] | None) -> list[tuple[Any, ...]]:
        return list(dict.fromkeys(tuple(results.params_of(r)[k] for k in keys or []) for r in rows))

    row_vals, col_vals = values_of(opts.row_panels), values_of(opts.col_panels)
    fig, axes = plt.subplots(
        len(row_vals), len(col_vals),
        figsize=(opts.plot_width * len(col_vals), opts.plot_height * len(row_vals)),
        squeeze=False,
    )  # fmt: skip
    failed: list[str] = []
    for i, rv in enumerate(row_vals):
        for j, cv in enumerate(col_vals):
            mine = [
                r for r in rows
                if tuple(results.params_of(r)[k] for k in opts.row_panels or []) == rv
                and tuple(results.params_of(r)[k] for k in opts.col_panels or []) == cv
            ]  # fmt: skip
            _draw_panel(axes[i][j], mine, results, opts, x_keys, failed)
            bits = [
                _label(dict(zip(keys, vals, strict=True)), keys)
                for keys, vals in ((opts.row_panels or [], rv), (opts.col_panels or [], cv))
                if keys
            ]
            if bits:
                axes[i][j].set_title(", ".join(bits), fontsize="small")
            axes[i][j].set_ylabel(opts.ylabel or _ylabel(metric, rows))
    gpus = sorted({r.GPU for r in rows if r.GPU})
    fig.suptitle(
        f"{opts.title}\n{', '.join(gpus) or 'GPU unknown'}; backend {rows[0].Backend if rows else '?'}"
    )
    if failed:
        fig.text(
            0.01, -0.02, "not drawn (no valid run): " + "; ".join(failed[:12])
            + (f"; and {len(failed) - 12} more" if len(failed) > 12 else ""),
            fontsize="x-small", ha="left", va="top", wrap=True,
        )  # fmt: skip
    fig.tight_layout()
    if opts.plot_callback is not None:
        opts.plot_callback(fig)
    out = Path(opts.filename)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)
    results.result.artifacts["plot"] = str(out)
    return out


def _ylabel(metric: str, rows: Sequence[Row]) -> str:
    unit = next((r.Unit for r in rows if r.Unit), None)
    runs = max((r.NumRuns for r in rows), default=0)
    norm = next((r.Normalized for r in rows if r.Normalized), None)
    what = f"{metric} relative to {norm}" if norm else metric
    return f"{what}{f' [{unit}]' if unit and not norm else ''} (avg of {runs} runs)"


def _draw_aggregate(
    ax: Any, ys: Sequence[float], opts: PlotOptions, x: float, width: float, color: str
) -> None:
    """The 'Avg' or 'Geomean' point of one series, after the dashed separator."""
    agg = _aggregate(ys, opts.show_aggregate or "avg")
    if agg is None:
        return
    if opts.plot_type == "bar":
        ax.bar([x], [agg], width, color=color, hatch="//")
    else:
        ax.plot([x], [agg], marker="D", color=color, linestyle="none")


def _draw_panel(
    ax: Any,
    rows: Sequence[Row],
    results: ProfileResults,
    opts: PlotOptions,
    x_keys: Sequence[str],
    failed: list[str],
) -> None:
    labels = list(dict.fromkeys(_label(results.params_of(r), x_keys) for r in rows))
    series = list(dict.fromkeys(_series_name(r, results.params_of(r), opts) for r in rows))
    n_x = len(labels) + (1 if opts.show_aggregate else 0)
    width = 0.8 / max(len(series), 1)

    def offset(s_i: int) -> float:  # bars of one x sit side by side; line points do not
        return width * (s_i + 0.5) - 0.4 if opts.plot_type == "bar" else 0.0

    for s_i, name in enumerate(series):
        xs: list[float] = []
        ys: list[float] = []
        err: list[list[float]] = [[], []]
        for r in rows:
            params = results.params_of(r)
            if _series_name(r, params, opts) != name:
                continue
            x = labels.index(_label(params, x_keys))
            if r.AvgValue is None:
                failed.append(f"{name} @ {labels[x]} ({r.ErrorClass or 'no value'})")
                continue
            xs.append(x + offset(s_i))
            ys.append(r.AvgValue)
            err[0].append(r.AvgValue - r.CI95_Lower if r.CI95_Lower is not None else 0.0)
            err[1].append(r.CI95_Upper - r.AvgValue if r.CI95_Upper is not None else 0.0)
        color = f"C{s_i % 10}"
        if opts.plot_type == "bar":
            ax.bar(xs, ys, width, yerr=err, capsize=3, color=color, label=name)
        else:
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=color, label=name)
        if opts.annotate_points:
            for px, y in zip(xs, ys, strict=True):
                ax.annotate(f"{y:.3g}", (px, y), textcoords="offset points", xytext=(0, 4),
                            ha="center", fontsize="x-small")  # fmt: skip
        if opts.show_aggregate:
            _draw_aggregate(ax, ys, opts, len(labels) + offset(s_i), width, color)
    if opts.show_aggregate:
        ax.axvline(len(labels) - 0.5, color="gray", linestyle="--", linewidth=1)
        labels = [*labels, "Geomean" if opts.show_aggregate == "geomean" else "Avg"]
    ax.set_xticks(
        range(n_x), labels, rotation=30 if n_x > 4 else 0, ha="right" if n_x > 4 else "center"
    )
    ax.set_xlabel(", ".join(x_keys) or "config")
    if series:
        ax.legend(fontsize="small")


__all__ = ["PlotOptions", "draw", "ignore_failures", "kernel", "plot"]
