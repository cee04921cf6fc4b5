"""The paper's figures (1, 3, 5, 6, 7, and 8: input tokens by source) from the traces database, as PNG and PDF, byte-for-byte reproducible.

Every figure reads `analysis.report.load_report_data` (strict pairing, calls
priced under the chosen table) and draws one comparison: by default the main
one (`full` when the database has it, else the first ablation present), which
`write_figures` puts in the output folder, and every other comparison present
in a subfolder of its name.  A panel without data says so instead of failing:
a small grid may have one benchmark, a few episodes and no instance both
agents solved.
"""
from __future__ import annotations

import textwrap
from functools import partial
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator  # noqa: E402

from agents.errors import CellbenchError  # noqa: E402
from analysis import stats, token_sources  # noqa: E402
from analysis.bootstrap import Bootstrap  # noqa: E402
from analysis.cost import PriceTable  # noqa: E402
from analysis.report import ReportData, compact_number, load_report_data, scripted_caveats  # noqa: E402

AGENT_LABELS = {"tool": "Tool calling", "code": "Code cells"}
AGENT_COLORS = {"tool": "#d95f02", "code": "#1b9e77"}
#: Light shade of each agent's colour: boxes of calls that returned no image.
AGENT_LIGHT = {"tool": "#fbd7b9", "code": "#bfe8dc"}
BENCHMARK_LABELS = {"libero_pro": "LIBERO-PRO", "bimanual": "Bimanual", "kitchen_atomic": "Kitchen atomic",
                    "kitchen_composite": "Kitchen composite", stats.POOLED: "All"}
#: Episodes per benchmark drawn in Fig. 7.
TOKEN_LINES_PER_BENCHMARK = 5

_STYLE = {
    **sns.axes_style("whitegrid"),
    "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9,
    "xtick.labelsize": 9, "ytick.labelsize": 9, "font.family": "DejaVu Sans",
    "svg.hashsalt": "cellbench", "pdf.fonttype": 42, "figure.dpi": 100, "savefig.dpi": 200,
    "savefig.bbox": "tight",
}
_TOKENS = FuncFormatter(lambda v, _: compact_number(v))


def _label(benchmark: str) -> str:
    return BENCHMARK_LABELS.get(benchmark, benchmark.replace("_", " "))


def _no_data(ax, message: str) -> None:
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=10, color="0.4", wrap=True,
            transform=ax.transAxes, bbox=dict(boxstyle="round", fc="0.96", ec="0.8"))


def comparisons(paired: pd.DataFrame) -> list[str]:
    """The comparisons present, in the ablations' order."""
    return stats.comparison_order(paired["comparison"].unique()) if len(paired) else []


def main_comparison(paired: pd.DataFrame) -> str | None:
    present = comparisons(paired)
    return "full" if "full" in present else (present[0] if present else None)


def _of_comparison(data: ReportData, comparison: str | None) -> tuple[str | None, pd.DataFrame]:
    """The comparison to draw (the main one when None) and its paired rows."""
    comparison = comparison or main_comparison(data.paired)
    return comparison, data.paired[data.paired["comparison"] == comparison]


def _call_axis(ax, longest: int, max_ticks: int = 12) -> None:
    """An "LLM call" axis from half a call before the first to half a call after the last: ticks at
    call 1 and at multiples of a 1-2-5 step (every call while they fit), never between calls."""
    longest = max(1, longest)
    step = next(s for s in (m * 10 ** e for e in range(7) for m in (1, 2, 5)) if longest / s <= max_ticks - 1)
    ax.xaxis.set_major_locator(FixedLocator(sorted({1, *range(step, longest + 1, step)})))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(0.5, longest + 0.5)


def _benchmarks(frame: pd.DataFrame) -> list[str]:
    return sorted(frame["benchmark"].unique())


def _legend_handles():
    return [Rectangle((0, 0), 1, 1, color=AGENT_COLORS[a], label=AGENT_LABELS[a]) for a in stats.AGENTS]


def _error_extents(values: list[float], intervals: list[tuple[float, float]]) -> list[list[float]]:
    """matplotlib's (2, n) error extents from (low, high) intervals around values; 0 where undefined.
    Nested lists, not an array: matplotlib's first-finite probe warns on a 2-D array under NumPy >= 1.25."""
    v = np.asarray(values, dtype=float)
    lo, hi = (np.asarray(x, dtype=float) for x in zip(*intervals)) if intervals else (v, v)
    return np.nan_to_num(np.clip(np.vstack([v - lo, hi - v]), 0, None)).tolist()


def _grouped_bars(ax, labels: list[str], values: dict[str, list[float]], horizontal: bool = False,
                  formatter=None, intervals: dict[str, list[tuple[float, float]]] | None = None) -> None:
    """Side-by-side bars, one per agent, at each label; `intervals`: (low, high) error bars per bar."""
    positions = np.arange(len(labels))
    width = 0.38
    for k, agent in enumerate(stats.AGENTS):
        offset = (k - 0.5) * width
        bar = ax.barh if horizontal else ax.bar
        errors = {}
        if intervals is not None:
            errors = {"xerr" if horizontal else "yerr": _error_extents(values[agent], intervals[agent]),
                      "error_kw": dict(ecolor="0.25", elinewidth=1, capsize=2.5)}
        bars = bar(positions + offset, values[agent], width, color=AGENT_COLORS[agent], label=AGENT_LABELS[agent],
                   **errors)
        if formatter is not None:
            ax.bar_label(bars, labels=[formatter(v) for v in values[agent]], fontsize=8, padding=2)
    if horizontal:
        ax.set_yticks(positions, labels)
        ax.invert_yaxis()
    else:
        ax.set_xticks(positions, labels)


# ---------------------------------------------------------------------------
# Fig. 1


def fig1_success(data: ReportData, comparison: str | None = None) -> plt.Figure:
    """(a) success by suite; (b, c) input tokens and dollars per solved episode, jointly solved instances."""
    comparison, paired = _of_comparison(data, comparison)
    suites = paired.groupby(["benchmark", "suite"]) if len(paired) else []
    rows = [(f"{_label(b)}: {s}", g) for (b, s), g in suites]
    fig, axes = plt.subplots(1, 3, figsize=(14, max(3.2, 0.45 * len(rows) + 1.6)),
                             gridspec_kw={"width_ratios": [1.5, 1, 1]})
    boot = data.bootstrap
    if rows:
        success = {r: stats.mean_intervals(g.assign(**{f"{a}_pct": 100 * g[f"{a}_success"].astype(float)
                                                        for a in stats.AGENTS}),
                                           [f"{a}_pct" for a in stats.AGENTS], boot, f"fig1|{comparison}|{r}")
                   for r, g in rows}
        _grouped_bars(axes[0], [r for r, _ in rows],
                      {a: [100 * g[f"{a}_success"].astype(bool).mean() for _, g in rows] for a in stats.AGENTS},
                      horizontal=True, formatter=lambda v: f"{v:.0f}",
                      intervals={a: [success[r][f"{a}_pct"] for r, _ in rows] for a in stats.AGENTS})
        axes[0].set_xlim(0, 118)
        axes[0].set_xlabel("Success rate (%)")
        axes[0].set_title(f"(a) Success by suite, all {len(paired)} instances")
    else:
        _no_data(axes[0], "(a) no paired instances")

    joint = stats.jointly_solved(paired)
    groups = [(_label(b), joint[joint["benchmark"] == b]) for b in _benchmarks(joint)]
    if groups:
        groups.append(("Avg", joint))
    for ax, column, title, fmt in ((axes[1], "input_tokens", "(b) Input tokens per solved episode", compact_number),
                                   (axes[2], "dollars", f"(c) Dollars per solved episode ({data.price.model})",
                                    lambda v: f"${v:.2f}")):
        if not groups:
            _no_data(ax, f"{title[:3]} no instance solved by both agents")
            continue
        means = {g: stats.mean_intervals(f, [f"{a}_{column}" for a in stats.AGENTS], boot,
                                         f"fig1|{comparison}|{g}|{column}") for g, f in groups}
        _grouped_bars(ax, [g for g, _ in groups], {a: [f[f"{a}_{column}"].mean() for _, f in groups]
                                                   for a in stats.AGENTS}, formatter=fmt,
                      intervals={a: [means[g][f"{a}_{column}"] for g, _ in groups] for a in stats.AGENTS})
        ax.set_title(f"{title}\n(mean over jointly solved: {len(joint)})")
        if column == "input_tokens":
            ax.yaxis.set_major_formatter(_TOKENS)
        ax.margins(y=0.15)
    fig.legend(handles=_legend_handles(), loc="lower center", ncol=2, frameon=False, bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(f"Tool calling vs code cells ({comparison or 'no data'}); error bars: "
                 f"{100 * boot.confidence:g}% paired bootstrap, tasks resampled as clusters", y=1.0)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    return fig


# ---------------------------------------------------------------------------
# Fig. 3


def _step_curve(at_solve: np.ndarray, n: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    solved = np.sort(at_solve[~np.isnan(at_solve)])
    x = np.concatenate([[lo], solved, [hi]])
    return x, 100 * stats.success_at_budget(solved, n, x)


def fig3_budget_cutoff(data: ReportData, measure: str = "input_tokens", comparison: str | None = None) -> plt.Figure:
    """Success if every episode stopped at a budget; dashed: first reach of tool's final success."""
    comparison, paired = _of_comparison(data, comparison)
    benchmarks = _benchmarks(paired) or ["–"]
    column = stats.BUDGET_MEASURES[measure]

    def budget_label(value: float) -> str:
        return f"${compact_number(value)}" if measure == "dollars" else compact_number(value)

    fig, axes = plt.subplots(1, len(benchmarks), figsize=(4.6 * len(benchmarks), 3.8), squeeze=False)
    for ax, benchmark in zip(axes[0], benchmarks):
        rows = paired[paired["benchmark"] == benchmark]
        at = {a: rows[f"{a}_{column}"].to_numpy(dtype=float) for a in stats.AGENTS}
        values = np.concatenate(list(at.values()))
        values = values[np.isfinite(values) & (values > 0)]
        if rows.empty or values.size == 0:
            _no_data(ax, f"{_label(benchmark)}: no solved episodes")
            continue
        n = len(rows)
        lo, hi = values.min() / 2, values.max() * 2
        if measure == "llm_calls":
            lo = max(lo, 0.7)  # no budget of half a call on the axis
        needed = int(rows["tool_success"].astype(bool).sum())
        for agent in stats.AGENTS:
            x, y = _step_curve(at[agent], n, lo, hi)
            ax.step(x, y, where="post", color=AGENT_COLORS[agent], lw=2, label=AGENT_LABELS[agent])
        reach = {a: stats.first_reach_budget(at[a], needed) for a in stats.AGENTS}
        ax.axhline(100 * needed / n, color="0.6", lw=0.8, ls=":")
        # Each dashed line's value beside it, off the line, on a white ground, at its own height:
        # to the right of the line, unless the smaller reach's label would not fit before the
        # other line; then the smaller one goes to the left of its line.
        finite = sorted((a for a in stats.AGENTS if np.isfinite(reach[a])), key=lambda a: reach[a])
        left_side = set()
        if len(finite) == 2 and reach[finite[0]] > 0:
            axes_points = ax.get_position().width * fig.get_figwidth() * 72
            gap_points = axes_points * np.log(reach[finite[1]] / reach[finite[0]]) / np.log(hi / lo)
            if gap_points < 0.62 * 9 * len(budget_label(reach[finite[0]])) + 12:
                left_side.add(finite[0])
        for k, agent in enumerate(stats.AGENTS):
            if agent in finite:
                ax.axvline(reach[agent], color=AGENT_COLORS[agent], ls="--", lw=1.2)
                left = agent in left_side
                ax.annotate(budget_label(reach[agent]), (reach[agent], 0.05 + 0.09 * k),
                            xycoords=ax.get_xaxis_transform(), xytext=(-4 if left else 4, 0),
                            textcoords="offset points", ha="right" if left else "left", va="bottom",
                            color=AGENT_COLORS[agent], fontsize=9,
                            bbox=dict(boxstyle="square,pad=0.15", fc="white", ec="none", alpha=0.85))
        if np.isfinite(reach["tool"]) and np.isfinite(reach["code"]) and reach["code"] > 0:
            ax.text(0.04, 0.98, f"{reach['tool'] / reach['code']:.1f}×", transform=ax.transAxes, fontsize=22,
                    fontweight="bold", va="top", color="0.2",
                    zorder=5, bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.85))
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(0, 125)  # room above 100 % for the ratio, clear of the curves
        ax.set_yticks(range(0, 101, 20))
        # Label 1-2-5 within a decade or two, decades only beyond: readable at any span.
        decades = np.log10(hi / lo)
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if decades <= 2.5 else (1.0,)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: budget_label(v)))
        ax.set_title(f"{_label(benchmark)} (n = {n}, {comparison})")
        ax.set_xlabel({"input_tokens": "Input-token budget per episode", "llm_calls": "LLM-call budget per episode",
                       "dollars": f"Dollar budget per episode ({data.price.model})"}[measure])
    axes[0][0].set_ylabel("Success rate (%)")
    fig.legend(handles=_legend_handles(), loc="lower center", ncol=2, frameon=False, bbox_to_anchor=(0.5, -0.04))
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


# ---------------------------------------------------------------------------
# Fig. 5


def fig5_decomposition(data: ReportData, comparison: str | None = None) -> plt.Figure:
    """Token ratio = LLM-call ratio x tokens-per-call ratio, tool / code, on jointly solved instances."""
    comparison, paired = _of_comparison(data, comparison)
    table = stats.token_decomposition(paired, data.bootstrap)
    table = table[(table["comparison"] == comparison) & table["input_tokens_ratio"].notna()]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.8 * len(table) + 2), 3.8))
    if table.empty:
        _no_data(ax, "No instance solved by both agents:\nnothing to decompose")
        return fig
    parts = [("llm_calls_ratio", "LLM calls", AGENT_COLORS["code"], 1.0),
             ("tokens_per_call_ratio", "Tokens per LLM call", AGENT_COLORS["code"], 0.4),
             ("input_tokens_ratio", "Input tokens (product)", "0.25", 1.0)]
    positions = np.arange(len(table))
    width = 0.26
    for k, (column, label, color, alpha) in enumerate(parts):
        errors = _error_extents(list(table[column]), list(zip(table[f"{column}_ci_low"], table[f"{column}_ci_high"])))
        bars = ax.bar(positions + (k - 1) * width, table[column], width, color=color, alpha=alpha, label=label,
                      yerr=errors, error_kw=dict(ecolor="0.25", elinewidth=1, capsize=2.5))
        ax.bar_label(bars, labels=[f"{v:.2f}×" for v in table[column]], fontsize=8, padding=2)
    ax.axhline(1.0, color="0.3", lw=1)
    ax.set_xticks(positions, [f"{_label(b)}\n(n = {n})" for b, n in zip(table["benchmark"], table["n_jointly_solved"])])
    ax.set_ylabel("Tool calling / code (×)")
    ax.set_title(f"Token savings on jointly solved instances, {comparison} (below 1×: code used more)\n"
                 f"bars: {100 * data.bootstrap.confidence:g}% paired bootstrap, tasks resampled as clusters",
                 fontsize=10)
    ax.margins(y=0.18)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False, fontsize=9)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# Fig. 6 and 7: call by call


def _calls_of(data: ReportData, trace_dir: str) -> pd.DataFrame:
    return data.calls[data.calls["trace_dir"] == trace_dir].sort_values("call_index")


def timeline_instance(data: ReportData, comparison: str | None = None) -> pd.Series | None:
    """The pair Fig. 6 shows: the jointly solved instance where code saved the most tokens (ties: by name)."""
    _, paired = _of_comparison(data, comparison)
    if paired.empty:
        return None
    joint = stats.jointly_solved(paired)
    pool = joint if len(joint) else paired
    ratio = pool["tool_input_tokens"] / pool["code_input_tokens"].where(pool["code_input_tokens"] > 0)
    ordered = pool.assign(_ratio=ratio.fillna(0)).sort_values(
        ["_ratio", "benchmark", "task", "seed", "repeat"], ascending=[False, True, True, True, True])
    return ordered.iloc[0]


def fig6_timeline(data: ReportData, comparison: str | None = None) -> plt.Figure:
    """One instance, both agents: a box per LLM call (number: tools or primitives it ran; dark: it
    returned images; outlined: it solved the task), and input tokens so far below."""
    pair = timeline_instance(data, comparison)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 5.6), gridspec_kw={"height_ratios": [1, 1.6]})
    if pair is None:
        _no_data(top, "No paired instance")
        _no_data(bottom, "No paired instance")
        return fig
    longest, top_tokens = 1, 0
    for row, agent in enumerate(stats.AGENTS):
        calls = _calls_of(data, pair[f"{agent}_trace_dir"])
        solve = pair[f"{agent}_calls_at_solve"]
        longest = max(longest, int(calls["call_index"].max()) if len(calls) else 0)
        for c in calls.itertuples():
            dark = c.images_returned > 0
            solving = bool(np.isfinite(solve) and c.call_index == solve)
            top.add_patch(Rectangle((c.call_index - 0.45, row - 0.38), 0.9, 0.76,
                                    facecolor=AGENT_COLORS[agent] if dark else AGENT_LIGHT[agent],
                                    edgecolor="black" if solving else "white", lw=2.2 if solving else 0.5))
            top.text(c.call_index, row, str(c.n_primitives), ha="center", va="center", fontsize=7 if len(calls) > 30 else 8,
                     color="white" if dark else "0.15")
        x = calls["call_index"].to_numpy()
        y = calls["cum_input_tokens"].to_numpy()
        top_tokens = max(top_tokens, float(y.max()) if len(y) else 0)
        # The solving call's tokens go in the legend: labels at the circles collide when both solve alike.
        label = AGENT_LABELS[agent]
        if np.isfinite(solve) and (x == solve).any():
            at = y[x == solve][0]
            bottom.plot([solve], [at], "o", ms=10, mfc="none", mec=AGENT_COLORS[agent], mew=2)
            label += f": solved at call {int(solve)}, after {compact_number(at)} tokens"
        else:
            label += ": not solved"
        bottom.plot(x, y, color=AGENT_COLORS[agent], lw=2, marker=".", label=label)
    for ax in (top, bottom):
        _call_axis(ax, longest, max_ticks=25)
    top.set_ylim(-0.6, 1.6)
    top.set_yticks([0, 1], [AGENT_LABELS[a] for a in stats.AGENTS])
    top.invert_yaxis()
    top.grid(False)
    top.set_xlabel("LLM call")
    top.set_title(f"{pair['comparison']}, {_label(pair['benchmark'])} {pair['task']}, seed {pair['seed']}: "
                  "each box one LLM call; "
                  "number = tools / primitives run; dark = returned images; outlined = solved", fontsize=10)
    # Tokens so far from nothing, so the gap between the agents reads true; room above for the legend.
    bottom.set_ylim(0, 1.18 * max(top_tokens, 1))
    bottom.yaxis.set_major_formatter(_TOKENS)
    bottom.set_xlabel("LLM call")
    bottom.set_ylabel("Input tokens so far")
    bottom.legend(loc="upper left", frameon=False)
    fig.tight_layout()
    return fig


def token_line_instances(paired: pd.DataFrame, k: int = TOKEN_LINES_PER_BENCHMARK) -> pd.DataFrame:
    """Up to k jointly solved instances spread over the range of tool calling's token use."""
    joint = stats.jointly_solved(paired).sort_values(["tool_input_tokens", "task", "seed", "repeat"])
    if len(joint) <= k:
        return joint
    return joint.iloc[np.unique(np.linspace(0, len(joint) - 1, k).round().astype(int))]


def fig7_tokens_per_call(data: ReportData, comparison: str | None = None) -> plt.Figure:
    """Input tokens so far, LLM call by LLM call, for a few jointly solved episodes per benchmark."""
    comparison, paired = _of_comparison(data, comparison)
    benchmarks = _benchmarks(paired) or ["–"]
    fig, axes = plt.subplots(1, len(benchmarks), figsize=(4.6 * len(benchmarks), 3.8), squeeze=False)
    for ax, benchmark in zip(axes[0], benchmarks):
        chosen = token_line_instances(paired[paired["benchmark"] == benchmark])
        if chosen.empty:
            _no_data(ax, f"{_label(benchmark)}: no instance\nsolved by both agents")
            continue
        longest, top_tokens = 1, 0
        for pair in chosen.itertuples():
            for agent in stats.AGENTS:
                calls = _calls_of(data, getattr(pair, f"{agent}_trace_dir"))
                longest = max(longest, int(calls["call_index"].max()) if len(calls) else 0)
                x, y = calls["call_index"].to_numpy(), calls["cum_input_tokens"].to_numpy()
                top_tokens = max(top_tokens, float(y.max()) if len(y) else 0)
                ax.plot(x, y, color=AGENT_COLORS[agent], lw=1.3, alpha=0.85)
                solve = getattr(pair, f"{agent}_calls_at_solve")
                if (x == solve).any():
                    ax.plot([solve], [y[x == solve][0]], "o", ms=6, mfc="white", mec=AGENT_COLORS[agent], mew=1.5)
        ax.yaxis.set_major_formatter(_TOKENS)
        ax.set_ylim(0, 1.08 * max(top_tokens, 1))
        _call_axis(ax, longest, max_ticks=8)
        ax.set_title(f"{_label(benchmark)} ({len(chosen)} instances, {comparison})")
        ax.set_xlabel("LLM call")
    axes[0][0].set_ylabel("Input tokens so far")
    fig.legend(handles=_legend_handles(), loc="lower center", ncol=2, frameon=False, bbox_to_anchor=(0.5, -0.04))
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


# ---------------------------------------------------------------------------
# Fig. 8: where the input tokens go

#: One colour per token source, in prompt order (fixed: no palette state between figures).
SOURCE_COLORS = dict(zip(token_sources.SOURCE_LABELS, (
    "#4c72b0", "#8172b3", "#64b5cd", "#937860", "#dd8452", "#c44e52", "#da8bc3", "#55a868")))


def fig8_input_sources(data: ReportData, comparison: str | None = None) -> plt.Figure:
    """Input tokens of each LLM call by source, stacked, tool calling beside code, on the jointly solved
    instances (the decomposition's): mean over the episodes still running at each call."""
    comparison, paired = _of_comparison(data, comparison)
    joint = stats.jointly_solved(paired)
    sources = data.sources if data.sources is not None else pd.DataFrame(columns=["trace_dir"])
    benchmarks = _benchmarks(joint) or ["–"]
    fig, axes = plt.subplots(len(benchmarks), 2, figsize=(11, 3.6 * len(benchmarks) + 0.8), squeeze=False,
                             sharey="row")
    for row, benchmark in zip(axes, benchmarks):
        rows = joint[joint["benchmark"] == benchmark]
        means = {a: token_sources.mean_sources_by_call(sources, rows[f"{a}_trace_dir"]) for a in stats.AGENTS}
        longest = max([1] + [int(m.index.max()) for m in means.values() if len(m)])
        per_call = {}
        for ax, agent in zip(row, stats.AGENTS):
            mean = means[agent]
            if mean.empty:
                _no_data(ax, f"{_label(benchmark)}, {AGENT_LABELS[agent]}:\nno jointly solved episode "
                             "with a token breakdown")
                continue
            x = mean.index.to_numpy()
            ax.stackplot(x, [mean[name].to_numpy() for name in token_sources.SOURCE_LABELS],
                         colors=list(SOURCE_COLORS.values()), alpha=0.92, lw=0)
            # Tokens per call over the episodes' calls: the decomposition's per-call measure, by source.
            chosen = sources[sources["trace_dir"].isin(set(rows[f"{agent}_trace_dir"]))]
            per_call[agent] = chosen["total"].mean()
            _call_axis(ax, longest, max_ticks=10)
            ax.yaxis.set_major_formatter(_TOKENS)
            ax.set_xlabel("LLM call")
            ax.set_title(f"{_label(benchmark)}: {AGENT_LABELS[agent]} (n = {len(rows)}, "
                         f"{compact_number(per_call[agent])} tokens per call)")
        row[0].set_ylabel("Input tokens of the call")
        if len(per_call) == 2 and per_call["code"]:
            row[1].text(0.98, 0.97, f"tokens per call, tool / code: {per_call['tool'] / per_call['code']:.2f}×",
                        transform=row[1].transAxes, ha="right", va="top", fontsize=9,
                        bbox=dict(boxstyle="round", fc="white", ec="0.8"))
    handles = [Rectangle((0, 0), 1, 1, color=SOURCE_COLORS[k], label=label)
               for k, label in token_sources.SOURCE_LABELS.items()]
    fig.legend(handles=handles[::-1], loc="lower center", ncol=4, frameon=False, bbox_to_anchor=(0.5, -0.01))
    fig.suptitle(f"Where the input tokens go, {comparison} (jointly solved instances; mean over the episodes "
                 "still running at each call)", fontsize=11)
    fig.tight_layout(rect=(0, 0.09 if len(benchmarks) == 1 else 0.05, 1, 1))
    return fig


# ---------------------------------------------------------------------------

FIGURES = {
    "fig1_success": fig1_success,
    "fig3_budget_cutoff": fig3_budget_cutoff,
    "fig3_budget_cutoff_llm_calls": partial(fig3_budget_cutoff, measure="llm_calls"),
    "fig3_budget_cutoff_dollars": partial(fig3_budget_cutoff, measure="dollars"),
    "fig5_decomposition": fig5_decomposition,
    "fig6_timeline": fig6_timeline,
    "fig7_tokens_per_call": fig7_tokens_per_call,
    "fig8_input_sources": fig8_input_sources,
}


def save_figure(fig: plt.Figure, out_dir: Path, name: str) -> list[Path]:
    """PNG and PDF with no timestamps or version strings in them: the same data gives the same bytes."""
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    fig.savefig(paths[0], metadata={"Software": None})
    fig.savefig(paths[1], metadata={"CreationDate": None, "Producer": None, "Creator": None})
    plt.close(fig)
    return paths


def draw(data: ReportData, name: str, comparison: str | None = None) -> plt.Figure:
    """Figure `name` of one comparison (the main one when None), with the note of a comparison whose
    ablation the planner cannot react to (the scripted planner reads neither guides nor images) above it."""
    fig = FIGURES[name](data, comparison=comparison)
    caveat = scripted_caveats(data.episodes).get(comparison or main_comparison(data.paired))
    if caveat:
        # Wrapped by hand to the figure's width (matplotlib's wrap=True confuses the tight bounding box).
        width = max(40, int(fig.get_figwidth() * 72 / (9 * 0.55)))
        fig.text(0.5, 1.02, textwrap.fill(caveat, width), ha="center", va="bottom", fontsize=9, color="#8a3b00",
                 bbox=dict(boxstyle="round,pad=0.3", fc="#fff4e5", ec="#e0b080"))
    return fig


def draw_comparison(data: ReportData, out: Path, comparison: str | None) -> list[Path]:
    """Every figure of one comparison (the main one when None) into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with plt.rc_context(_STYLE):
        for name in FIGURES:
            written += save_figure(draw(data, name, comparison), out, name)
    return written


def write_figures(db_path: str | Path, out_dir: str | Path, price: PriceTable,
                  comparison: str | None = None, bootstrap: Bootstrap | None = None) -> list[Path]:
    """The main comparison's figures in `out_dir` and every other comparison's in `out_dir/<comparison>/`;
    with `comparison`, that one's alone in `out_dir` (a comparison not in the database is a user error)."""
    data = load_report_data(db_path, price, bootstrap)
    out = Path(out_dir)
    present = comparisons(data.paired)
    if comparison is not None:
        if comparison not in present:
            raise CellbenchError(f"no comparison {comparison!r} in {db_path}; present: "
                                 + (", ".join(present) if present else "none (no paired instances)"))
        return draw_comparison(data, out, comparison)
    main = main_comparison(data.paired)
    written = draw_comparison(data, out, main)
    for other in present:
        if other != main:
            written += draw_comparison(data, out / other, other)
    return written
