"""`cellbench browse`: a static results browser over the traces database, opened straight from disk.

    cellbench browse [--db results/traces.duckdb] [--out results/site] [--figures figures]

writes `OUT/index.html` and beside it:

* `data/episodes.js`, `data/pairs.js`: every episode and every pair as compact
  rows, loaded with a plain `<script src>` (a `file://` page may not fetch);
  the index pages, sorts and filters them in the browser, so 5,400 episodes
  cost a ~1 MB script and 100 table rows at a time;
* `episodes/<trace path>/index.html`: the episode page of `cellbench view`
  (agents/view.py), with its images hard-linked (copied across file systems)
  into `images/` beside it instead of inlined; rewritten only when the trace
  is newer than the page or the code that draws pages changed;
* `pairs/<comparison>/<benchmark>/<task>/seed<seed>[/r<repeat>].html`: the tool
  and the code episode of one instance side by side: both endings, one plot
  of cumulative input tokens and dollars, both call timelines on its call
  axis, and a table that puts each code cell beside the tool calls it
  replaced (the primitives both ran, aligned by `difflib`), with the images
  each call returned;
* `figures/*.png`: the main comparison's figures from --figures, when present.

Nothing is fetched from a network and no server is needed; every link is a
relative path to a file of the site.
"""
from __future__ import annotations

import difflib
import html
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from agents.view import CSS as VIEW_CSS
from agents.view import _load_jsonl, render
from analysis import stats
from analysis.cost import PriceTable
from analysis.report import ReportData, build_tables, format_value, load_report_data, open_database

#: The tables of the report shown on the index, in this order.
INDEX_TABLES = ("main_results", "success", "jointly_solved", "decomposition", "input_sources", "cached_share",
                "endings")
AGENT_COLORS = {"tool": "#d95f02", "code": "#1b9e77"}
AGENT_LIGHT = {"tool": "#fbd7b9", "code": "#bfe8dc"}
AGENT_LABELS = {"tool": "Tool calling", "code": "Code cells"}
EPISODE_COLUMNS = ("benchmark", "task", "seed", "repeat", "agent", "ablation", "status", "success", "n_calls",
                   "input_tokens", "dollars")
PAIR_COLUMNS = ("comparison", "benchmark", "task", "seed", "repeat", "tool_status", "code_status", "tool_n_calls",
                "code_n_calls", "tool_input_tokens", "code_input_tokens")


@dataclass
class SiteSummary:
    out: Path
    episodes: int = 0
    episode_pages_written: int = 0
    pairs: int = 0
    figures: int = 0
    seconds: float = 0.0


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _href(target: Path, start: Path) -> str:
    """A relative link from a page in `start` to `target` (always forward slashes)."""
    return Path(os.path.relpath(target, start)).as_posix()


# ---------------------------------------------------------------------------
# Where things go


class Layout:
    """Paths of the site's pages, from the episode rows."""

    def __init__(self, out: Path, results_root: str | None):
        self.out = out
        self.root = results_root

    def trace_path(self, trace_dir: str) -> Path:
        return Path(trace_dir) if os.path.isabs(trace_dir) else Path(os.path.abspath(trace_dir))

    def episode_slug(self, trace_dir: str) -> str:
        """The trace's path below the results folder (readable, unique); a hash when it lies elsewhere."""
        full = str(self.trace_path(trace_dir))
        if self.root:
            rel = os.path.relpath(full, self.root)
            if not rel.startswith(".."):
                return Path(rel).as_posix()
        import hashlib

        return "other/" + hashlib.sha1(full.encode()).hexdigest()[:16]

    def episode_page(self, trace_dir: str) -> Path:
        return self.out / "episodes" / self.episode_slug(trace_dir) / "index.html"

    def pair_page(self, row) -> Path:
        name = f"seed{row['seed']}" + (f"/r{row['repeat']}" if row["repeat"] else "")
        return self.out / "pairs" / str(row["comparison"]) / str(row["benchmark"]) / str(row["task"]) / f"{name}.html"


# ---------------------------------------------------------------------------
# Episode pages


def _link_images(trace: Path, page_dir: Path) -> None:
    """The trace's images beside its page: hard links (no space), copies across file systems."""
    source = trace / "images"
    if not source.is_dir():
        return
    target = page_dir / "images"
    target.mkdir(parents=True, exist_ok=True)
    for image in source.iterdir():
        dest = target / image.name
        if dest.exists():
            continue
        try:
            os.link(image, dest)
        except OSError:
            shutil.copy2(image, dest)


def pages_version() -> str:
    """Digest of the code that draws episode pages: when it changes, every page is redrawn."""
    import hashlib

    import agents.view

    h = hashlib.sha256(Path(agents.view.__file__).read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:16]


def write_episode_page(trace: Path, page: Path, index_href: str, force: bool = False) -> bool:
    """The episode's page (agents/view.py) unless it is newer than the trace; True when written."""
    record = trace / "episode.json"
    if not record.exists():
        record = trace / "planner_error.json"
    if (not force and page.exists() and record.exists()
            and page.stat().st_mtime_ns >= record.stat().st_mtime_ns):
        return False
    page.parent.mkdir(parents=True, exist_ok=True)
    nav = f'<p class="nav"><a href="{_e(index_href)}">&larr; all episodes</a></p>'
    if not trace.is_dir():
        page.write_text(f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>missing trace</title>"
                        f"</head><body>{nav}<p>The trace directory {_e(trace)} is gone.</p></body></html>\n")
        return True
    _link_images(trace, page.parent)
    tmp = page.with_name(page.name + ".tmp")
    tmp.write_text(render(trace, inline_images=False, nav=nav))
    os.replace(tmp, page)
    return True


# ---------------------------------------------------------------------------
# Pair pages


def _primitive_names(prims: list[dict]) -> list[tuple[str, int]]:
    return [(p["name"], p["call_index"]) for p in prims]


def align_calls(tool_prims: list[dict], code_prims: list[dict], tool_calls: list[int],
                code_calls: list[int]) -> list[tuple[list[int], list[int]]]:
    """Rows of (code calls, tool calls): each code call with the tool calls whose primitives it also ran
    (matched in order by difflib over the primitive names), then tool calls nothing matched, in order."""
    tool_seq, code_seq = _primitive_names(tool_prims), _primitive_names(code_prims)
    matcher = difflib.SequenceMatcher(None, [n for n, _ in tool_seq], [n for n, _ in code_seq], autojunk=False)
    anchor: dict[int, int] = {}  # tool call -> the first code call that ran one of its primitives
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            tool_call, code_call = tool_seq[block.a + k][1], code_seq[block.b + k][1]
            anchor.setdefault(tool_call, code_call)
    rows: list[tuple[list[int], list[int]]] = []
    row_of_code: dict[int, int] = {}
    for c in code_calls:
        row_of_code[c] = len(rows)
        rows.append(([c], []))
    # Unmatched tool calls go right after the row of the last matched one before them.
    inserted: list[tuple[int, int, int]] = []  # (after row, order, tool call)
    last_row = -1
    for order, t in enumerate(tool_calls):
        if t in anchor and anchor[t] in row_of_code:
            last_row = max(last_row, row_of_code[anchor[t]])
            rows[row_of_code[anchor[t]]][1].append(t)
        else:
            inserted.append((last_row, order, t))
    out: list[tuple[list[int], list[int]]] = []
    pending = sorted(inserted)
    k = 0
    for i in range(-1, len(rows)):
        if i >= 0:
            out.append(rows[i])
        while k < len(pending) and pending[k][0] == i:
            if out and not out[-1][0] and out[-1][1]:  # runs of unmatched tool calls share one row
                out[-1][1].append(pending[k][2])
            else:
                out.append(([], [pending[k][2]]))
            k += 1
    return out


def _ticks(vmax: float) -> np.ndarray:
    return MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(0, max(vmax, 1e-9))


#: One x scale for the plot and the timelines of a pair page: same width, same margins.
_W, _LEFT, _RIGHT = 900, 70, 70


def _x(call: float, longest: int) -> float:
    return _LEFT + (call - 0.5) / max(longest, 1) * (_W - _LEFT - _RIGHT)


def svg_plot(series: dict[str, dict[str, list]], longest: int) -> str:
    """Cumulative input tokens (solid, left axis) and dollars (dashed, right axis) per LLM call, both agents."""
    height, top, bottom = 300, 16, 40
    tokens_max = max([1] + [float(max(s["cum_input_tokens"])) for s in series.values() if s["call_index"]])
    dollars_max = max([1e-9] + [float(max(s["cum_dollars"])) for s in series.values() if s["call_index"]])
    t_ticks, d_ticks = _ticks(tokens_max), _ticks(dollars_max)
    t_top, d_top = t_ticks[-1], d_ticks[-1]

    def y(value: float, top_value: float) -> float:
        return height - bottom - value / top_value * (height - top - bottom)

    parts = [f'<svg class="plot" viewBox="0 0 {_W} {height}" width="{_W}" height="{height}" role="img" '
             'aria-label="cumulative input tokens and dollars per LLM call">',
             f'<rect x="{_LEFT}" y="{top}" width="{_W - _LEFT - _RIGHT}" height="{height - top - bottom}" '
             'fill="#fbfbfd" stroke="#ccd"/>']
    for v in t_ticks:
        parts.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y(v, t_top):.1f}" y2="{y(v, t_top):.1f}" stroke="#e4e6ee"/>'
                     f'<text x="{_LEFT - 6}" y="{y(v, t_top) + 4:.1f}" text-anchor="end">{_compact(v)}</text>')
    for v in d_ticks:
        parts.append(f'<text x="{_W - _RIGHT + 6}" y="{y(v, d_top) + 4:.1f}">${v:.3g}</text>')
    step = max(1, int(np.ceil(longest / 15)))
    for call in range(1, longest + 1):
        if call == 1 or call % step == 0:
            parts.append(f'<text x="{_x(call, longest):.1f}" y="{height - bottom + 16}" text-anchor="middle">{call}</text>')
    parts.append(f'<text x="{_W / 2}" y="{height - 4}" text-anchor="middle">LLM call</text>'
                 f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" text-anchor="middle">'
                 'input tokens so far (solid)</text>'
                 f'<text x="{_W - 10}" y="{height / 2}" transform="rotate(90 {_W - 10} {height / 2})" '
                 'text-anchor="middle">dollars so far (dashed)</text>')
    for agent, s in series.items():
        if not s["call_index"]:
            continue
        xs = [_x(c, longest) for c in s["call_index"]]
        tok = " ".join(f"{a:.1f},{y(v, t_top):.1f}" for a, v in zip(xs, s["cum_input_tokens"]))
        dol = " ".join(f"{a:.1f},{y(v, d_top):.1f}" for a, v in zip(xs, s["cum_dollars"]))
        color = AGENT_COLORS[agent]
        parts.append(f'<polyline class="tokens-{agent}" points="{tok}" fill="none" stroke="{color}" stroke-width="2.2"/>'
                     f'<polyline class="dollars-{agent}" points="{dol}" fill="none" stroke="{color}" '
                     'stroke-width="1.6" stroke-dasharray="6 4"/>')
        parts += [f'<circle cx="{a:.1f}" cy="{y(v, t_top):.1f}" r="2.6" fill="{color}"/>'
                  for a, v in zip(xs, s["cum_input_tokens"])]
    for k, agent in enumerate(series):
        parts.append(f'<rect x="{_LEFT + 12 + 170 * k}" y="{top + 8}" width="14" height="4" fill="{AGENT_COLORS[agent]}"/>'
                     f'<text x="{_LEFT + 30 + 170 * k}" y="{top + 14}">{AGENT_LABELS[agent]}</text>')
    parts.append("</svg>")
    return "".join(parts)


def svg_timelines(calls: dict[str, list[dict]], solved: dict[str, float], longest: int) -> str:
    """One box per LLM call of each agent on the plot's call axis: dark = returned images, outlined =
    the solving call, number = primitives run; each box links to its row of the table below."""
    height = 84
    parts = [f'<svg class="timeline" viewBox="0 0 {_W} {height}" width="{_W}" height="{height}" role="img" '
             'aria-label="call timelines">']
    width = (_W - _LEFT - _RIGHT) / max(longest, 1)
    for row, agent in enumerate(stats.AGENTS):
        y = 6 + row * 38
        parts.append(f'<text x="{_LEFT - 6}" y="{y + 20}" text-anchor="end">{AGENT_LABELS[agent]}</text>')
        for c in calls.get(agent, []):
            i = c["call_index"]
            dark = c.get("images_returned", 0) > 0
            solving = solved.get(agent) == i
            x = _x(i, longest) - width * 0.45
            label = c.get("tool_name") or c.get("action_kind")
            parts.append(
                f'<a href="#{agent}-{i}"><rect class="box-{agent}" x="{x:.1f}" y="{y}" width="{width * 0.9:.1f}" height="30" '
                f'fill="{AGENT_COLORS[agent] if dark else AGENT_LIGHT[agent]}" stroke="{"#000" if solving else "#fff"}" '
                f'stroke-width="{2.2 if solving else 0.6}"><title>call {i}: {_e(label)}</title></rect>'
                + (f'<text x="{x + width * 0.45:.1f}" y="{y + 19}" text-anchor="middle" fill="{"#fff" if dark else "#333"}">'
                   f'{c.get("n_primitives", 0)}</text>' if width > 14 else "")
                + "</a>")
    parts.append("</svg>")
    return "".join(parts)


def _compact(v: float) -> str:
    if abs(v) >= 1e6:
        return f"{v / 1e6:.3g}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.3g}k"
    return f"{v:.3g}"


def _images_by_call(trace: Path) -> dict[int, list[str]]:
    """The trace's image files by the call that returned them (0: the opening images)."""
    out: dict[int, list[str]] = {}
    try:
        names = sorted(os.listdir(trace / "images"))
    except OSError:
        return out
    for name in names:
        if name.startswith("call") and name[4:7].isdigit():
            out.setdefault(int(name[4:7]), []).append(name)
    return out


def _thumbs(names: list[str], image_dir: Path, page_dir: Path) -> str:
    if not names:
        return ""
    return '<div class="imgs">' + "".join(
        f'<a href="{_e(_href(image_dir / n, page_dir))}"><img class="thumb small" loading="lazy" alt="{_e(n)}" '
        f'title="{_e(n)}" src="{_e(_href(image_dir / n, page_dir))}"></a>' for n in names) + "</div>"


def _action_html(trace: Path, call: dict) -> str:
    if call["action_kind"] == "cell":
        cell = trace / "cells" / f"cell_{call['call_index']:03d}.py"
        code = cell.read_text() if cell.exists() else "(cell file missing)"
        return f'<pre class="code">{_e(code)}</pre>'
    name = call.get("tool_name") or call["action_kind"]
    args = json.dumps(call.get("tool_args")) if call.get("tool_args") is not None else ""
    return f'<pre class="code">{_e(name)}({_e(args)})</pre>'


def _call_cell(agent: str, trace: Path, call: dict, prims: list[dict], images: list[str], image_dir: Path,
               page_dir: Path, dollars: float, cum_tokens: float) -> str:
    i = call["call_index"]
    flags = ""
    if call.get("exception"):
        flags += f' <span class="badge bad">{_e(call["exception"])}</span>'
    if call.get("success_after"):
        flags += ' <span class="badge ok">solved</span>'
    names = ", ".join(p["name"] + ("*" if p["acting"] else "") for p in prims) or "none"
    return (f'<div class="call" id="{agent}-{i}"><div class="label">call {i}{flags}</div>{_action_html(trace, call)}'
            f'<div class="tokens">primitives: {_e(names)}<br>input {call["input_tokens"]:,} '
            f'(cached {call["cached_input_tokens"]:,}) · so far {cum_tokens:,.0f} · ${dollars:.4f}</div>'
            f'{_thumbs(images, image_dir, page_dir)}</div>')


def _ending(agent: str, row, episode_href: str) -> str:
    status = row[f"{agent}_status"]
    cls = "ok" if row[f"{agent}_success"] else "bad"
    solved = row[f"{agent}_solved_at_call"]
    solved = "–" if pd.isna(solved) else int(solved)
    return (f'<div class="ending" style="border-color:{AGENT_COLORS[agent]}"><h3>{AGENT_LABELS[agent]} '
            f'<span class="badge {cls}">{_e(status)}</span></h3>'
            f'<div>success <b>{bool(row[f"{agent}_success"])}</b> · solved at call {solved} · '
            f'{int(row[f"{agent}_n_calls"])} LLM calls · {int(row[f"{agent}_input_tokens"]):,} input tokens · '
            f'${row[f"{agent}_dollars"]:.4f}</div><a href="{_e(episode_href)}">episode page</a></div>')


PAIR_CSS = """
.pairgrid { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.ending { background: #fff; border: 1px solid; border-left-width: 5px; border-radius: 6px; padding: 8px 12px; }
.ending h3 { margin: 0 0 4px; font-size: 15px; }
svg { font: 11px sans-serif; background: #fff; display: block; }
table.align { table-layout: fixed; background: #fff; }
table.align td { width: 50%; border-bottom: 1px solid #d9dce3; padding: 6px; }
.call + .call { margin-top: 8px; border-top: 1px dashed #d9dce3; padding-top: 6px; }
img.thumb.small { width: 120px; }
table.align pre.code { max-height: 360px; overflow-y: auto; }
.nav { margin: 0 0 8px; }
main { max-width: 1300px; }
"""


def _calls_by_dir(calls: pd.DataFrame) -> dict[str, dict[str, list]]:
    """Each episode's priced calls as plain lists (one pass; pandas per page costs more than the page)."""
    keys = ("call_index", "dollars", "cum_input_tokens", "cum_dollars")
    columns = {k: calls[k].tolist() for k in keys}
    dirs = calls["trace_dir"].tolist()
    out: dict[str, dict[str, list]] = {}
    for n, d in enumerate(dirs):
        entry = out.get(d)
        if entry is None:
            entry = out[d] = {k: [] for k in keys}
        for k in keys:
            entry[k].append(columns[k][n])
    return out


def write_pair_page(page: Path, row, layout: Layout, data: ReportData, calls_by_dir: dict) -> None:
    page_dir = page.parent
    traces = {a: layout.trace_path(row[f"{a}_trace_dir"]) for a in stats.AGENTS}
    records = {a: _load_jsonl(traces[a] / "calls.jsonl") for a in stats.AGENTS}
    prims = {a: _load_jsonl(traces[a] / "primitives.jsonl") for a in stats.AGENTS}
    empty = {"call_index": [], "dollars": [], "cum_input_tokens": [], "cum_dollars": []}
    priced = {a: calls_by_dir.get(row[f"{a}_trace_dir"], empty) for a in stats.AGENTS}
    images = {a: _images_by_call(traces[a]) for a in stats.AGENTS}
    longest = max([1] + [len(records[a]) for a in stats.AGENTS])
    solved = {a: row[f"{a}_calls_at_solve"] for a in stats.AGENTS}
    episode_pages = {a: layout.episode_page(row[f"{a}_trace_dir"]) for a in stats.AGENTS}
    image_dirs = {a: episode_pages[a].parent / "images" for a in stats.AGENTS}
    by_call = {a: {} for a in stats.AGENTS}
    for a in stats.AGENTS:
        for p in prims[a]:
            by_call[a].setdefault(p["call_index"], []).append(p)
    money = {a: dict(zip(priced[a]["call_index"], zip(priced[a]["dollars"], priced[a]["cum_input_tokens"])))
             for a in stats.AGENTS}
    calls = {a: {c["call_index"]: c for c in records[a]} for a in stats.AGENTS}

    def cell(agent: str, indices: list[int]) -> str:
        return "".join(_call_cell(agent, traces[agent], calls[agent][i], by_call[agent].get(i, []),
                                  images[agent].get(i, []), image_dirs[agent], page_dir,
                                  *money[agent].get(i, (0.0, 0.0)))
                       for i in indices if i in calls[agent])

    rows = align_calls(prims["tool"], prims["code"], sorted(calls["tool"]), sorted(calls["code"]))
    opening = "".join(f'<td><div class="label">opening images</div>'
                      f'{_thumbs(images[a].get(0, []), image_dirs[a], page_dir)}</td>' for a in stats.AGENTS)
    table = [f'<table class="align"><tr><th>{AGENT_LABELS["tool"]}: tool calls</th>'
             f'<th>{AGENT_LABELS["code"]}: the cells that replaced them</th></tr><tr>{opening}</tr>']
    for code_calls, tool_calls in rows:
        table.append(f"<tr><td>{cell('tool', tool_calls)}</td><td>{cell('code', code_calls)}</td></tr>")
    table.append("</table>")
    title = f"{row['task']} seed {row['seed']}" + (f" repeat {row['repeat']}" if row["repeat"] else "")
    index_href = _href(layout.out / "index.html", page_dir)
    body = [
        f'<p class="nav"><a href="{_e(index_href)}">&larr; all episodes and pairs</a></p>',
        f"<h1>{_e(title)} · {_e(row['benchmark'])} · comparison {_e(row['comparison'])}</h1>",
        '<div class="pairgrid">' + "".join(_ending(a, row, _href(episode_pages[a], page_dir)) for a in stats.AGENTS)
        + "</div>",
        "<h2>Input tokens and dollars so far</h2>",
        svg_plot({a: priced[a] for a in stats.AGENTS}, longest),
        svg_timelines({a: records[a] for a in stats.AGENTS}, solved, longest),
        '<p class="tokens">Boxes: one LLM call each (number: primitives it ran; dark: it returned images; '
        "outlined: the solving call); click one to reach it below. Rows below put each code cell beside the "
        "tool calls whose primitives it also ran (in order); a tool call matched by no cell has a row of its "
        "own. * marks acting primitives.</p>",
        "<h2>Calls side by side</h2>", "".join(table),
    ]
    page_dir.mkdir(parents=True, exist_ok=True)
    page.write_text("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                    f"<title>{_e(title)} · {_e(row['comparison'])}</title><style>{VIEW_CSS}{PAIR_CSS}</style></head>"
                    "<body><main>" + "\n".join(body) + "</main></body></html>\n")


# ---------------------------------------------------------------------------
# The index


INDEX_JS = r"""
(function () {
  function table(spec) {
    const data = window[spec.data], cols = data.columns, all = data.rows;
    const root = document.getElementById(spec.id);
    const state = { sort: null, dir: 1, page: 0, size: 100, text: "", select: {} };
    const bar = document.createElement("div"); bar.className = "controls";
    const search = document.createElement("input");
    search.type = "search"; search.placeholder = "filter (any column)"; search.className = "search";
    search.oninput = () => { state.text = search.value.toLowerCase(); state.page = 0; draw(); };
    bar.appendChild(search);
    spec.selects.forEach(name => {
      const k = cols.indexOf(name), sel = document.createElement("select");
      sel.dataset.column = name;
      const values = Array.from(new Set(all.map(r => String(r[k])))).sort();
      sel.innerHTML = `<option value="">${name}: all</option>` + values.map(v => `<option>${v}</option>`).join("");
      sel.onchange = () => { state.select[k] = sel.value; state.page = 0; draw(); };
      bar.appendChild(sel);
    });
    const info = document.createElement("span"); info.className = "info"; bar.appendChild(info);
    const prev = document.createElement("button"); prev.textContent = "‹ prev";
    const next = document.createElement("button"); next.textContent = "next ›";
    prev.onclick = () => { state.page--; draw(); }; next.onclick = () => { state.page++; draw(); };
    bar.appendChild(prev); bar.appendChild(next);
    root.appendChild(bar);
    const t = document.createElement("table"); t.className = "list"; root.appendChild(t);
    const head = document.createElement("tr");
    spec.shown.forEach(name => {
      const th = document.createElement("th"); th.textContent = name; th.title = "sort";
      th.onclick = () => { const k = cols.indexOf(name); state.dir = state.sort === k ? -state.dir : 1; state.sort = k; draw(); };
      head.appendChild(th);
    });
    const th = document.createElement("th"); th.textContent = "pages"; head.appendChild(th);
    t.appendChild(head);
    const body = document.createElement("tbody"); t.appendChild(body);
    function draw() {
      let rows = all.filter(r => Object.entries(state.select).every(([k, v]) => !v || String(r[k]) === v)
        && (!state.text || r.some(x => String(x).toLowerCase().includes(state.text))));
      if (state.sort !== null) {
        const k = state.sort;
        rows = rows.slice().sort((a, b) => (a[k] < b[k] ? -1 : a[k] > b[k] ? 1 : 0) * state.dir);
      }
      const pages = Math.max(1, Math.ceil(rows.length / state.size));
      state.page = Math.min(Math.max(state.page, 0), pages - 1);
      const start = state.page * state.size, shown = rows.slice(start, start + state.size);
      info.textContent = `${rows.length ? start + 1 : 0}–${start + shown.length} of ${rows.length}` +
        (rows.length < all.length ? ` (filtered from ${all.length})` : "") + ` · page ${state.page + 1} of ${pages}`;
      prev.disabled = state.page === 0; next.disabled = state.page >= pages - 1;
      body.innerHTML = shown.map(r => "<tr>" + spec.shown.map(name => {
        const v = r[cols.indexOf(name)];
        return `<td class="${typeof v === "number" ? "num" : ""}">${spec.format(name, v)}</td>`;
      }).join("") + "<td>" + r[cols.indexOf("links")].map(([label, href]) =>
        `<a href="${href}">${label}</a>`).join(" · ") + "</td></tr>").join("");
    }
    draw();
  }
  function format(name, v) {
    if (v === null || v === undefined) return "–";
    if (name.endsWith("dollars")) return "$" + Number(v).toFixed(4);
    if (typeof v === "number") return v.toLocaleString("en-US");
    return String(v).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
  }
  table({ id: "episodes", data: "CELLBENCH_EPISODES", shown: __EPISODE_COLUMNS__, format,
          selects: ["benchmark", "agent", "ablation", "status"] });
  table({ id: "pairs", data: "CELLBENCH_PAIRS", shown: __PAIR_COLUMNS__, format,
          selects: ["comparison", "benchmark"] });
})();
"""

INDEX_CSS = """
main { max-width: 1300px; }
.controls { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 6px 0; }
.controls .info { color: #4a5265; font-size: 12.5px; }
input.search { padding: 3px 6px; min-width: 220px; }
table.list, table.report { background: #fff; border: 1px solid #d9dce3; }
table.list th { cursor: pointer; user-select: none; }
table.report td, table.report th { white-space: nowrap; }
.scroll { overflow-x: auto; }
.figs { display: flex; flex-wrap: wrap; gap: 12px; }
.figs img { max-width: 620px; width: 100%; border: 1px solid #d9dce3; background: #fff; }
"""


def _report_table_html(table) -> str:
    frame = table.frame
    head = "".join(f"<th>{_e(c)}</th>" for c in frame.columns)
    rows = "".join("<tr>" + "".join(f"<td>{_e(format_value(c, v))}</td>" for c, v in zip(frame.columns, r)) + "</tr>"
                   for r in frame.itertuples(index=False))
    if frame.empty:
        rows = f'<tr><td colspan="{max(1, len(frame.columns))}">No rows: nothing in the database qualifies.</td></tr>'
    return (f'<h3 id="table-{_e(table.name)}">{_e(table.title)}</h3><p class="tokens">{_e(table.note)}</p>'
            f'<div class="scroll"><table class="report"><tr>{head}</tr>{rows}</table></div>')


def _js_value(v: Any) -> Any:
    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    return v


def _write_js(path: Path, name: str, columns: list[str], rows: list[list[Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({"columns": columns, "rows": rows}, separators=(",", ":"), ensure_ascii=False)
    # "</" could close a script element if the file were ever inlined.
    payload = payload.replace("</", "<\\/")
    path.write_text(f"window.{name} = {payload};\n")


def _copy_figures(figures_dir: Path | None, out: Path) -> list[str]:
    if figures_dir is None or not figures_dir.is_dir():
        return []
    target = out / "figures"
    target.mkdir(parents=True, exist_ok=True)
    names = []
    for png in sorted(figures_dir.glob("*.png")):
        shutil.copy2(png, target / png.name)
        names.append(png.name)
    return names


def build_site(db_path: str | Path, out_dir: str | Path, price: PriceTable, figures_dir: str | Path | None = None,
               progress=sys.stderr, bootstrap=None) -> SiteSummary:
    """Write the whole site into `out_dir` (see the module docstring); returns what it wrote.
    `bootstrap`: the tables' interval settings (analysis.bootstrap.Bootstrap; None: its defaults)."""
    started = time.perf_counter()
    out = Path(out_dir)
    summary = SiteSummary(out=out)
    data = load_report_data(db_path, price, bootstrap)
    con = open_database(db_path)
    try:
        root = dict(con.execute("SELECT key, value FROM meta").fetchall()).get("results_root")
    finally:
        con.close()
    layout = Layout(out, root)
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"

    episodes = data.episodes
    dollars = data.calls.groupby("trace_dir")["dollars"].sum()
    pair_links: dict[str, list[list[str]]] = {}
    pair_rows = []
    for row in data.paired.to_dict("records"):
        page = layout.pair_page(row)
        href = _href(page, out)
        for agent in stats.AGENTS:
            pair_links.setdefault(row[f"{agent}_trace_dir"], []).append([f"pair ({row['comparison']})", href])
        pair_rows.append([_js_value(row[c]) for c in PAIR_COLUMNS] + [[["pair page", href]]])

    version_file = out / "data" / "pages.version"
    version = pages_version()
    redraw = not version_file.exists() or version_file.read_text().strip() != version
    order = {c: k for k, c in enumerate(stats.comparison_order(data.paired["comparison"].unique()))}
    for links in pair_links.values():  # the pairs of one episode in the ablations' order
        links.sort(key=lambda link: order.get(link[0][len("pair ("):-1], len(order)))
    episode_rows = []
    for n, row in enumerate(episodes.to_dict("records"), 1):
        page = layout.episode_page(row["trace_dir"])
        written = write_episode_page(layout.trace_path(row["trace_dir"]), page, _href(index, page.parent), redraw)
        summary.episode_pages_written += written
        values = {**row, "dollars": dollars.get(row["trace_dir"], 0.0)}
        episode_rows.append([_js_value(values[c]) for c in EPISODE_COLUMNS]
                            + [[["episode", _href(page, out)], *pair_links.get(row["trace_dir"], [])]])
        if progress is not None and n % 500 == 0:
            print(f"browse: {n}/{len(episodes)} episode pages", file=progress)
    summary.episodes = len(episode_rows)

    calls_by_dir = _calls_by_dir(data.calls)
    for n, row in enumerate(data.paired.to_dict("records"), 1):
        write_pair_page(layout.pair_page(row), row, layout, data, calls_by_dir)
        if progress is not None and n % 500 == 0:
            print(f"browse: {n}/{len(data.paired)} pair pages", file=progress)
    summary.pairs = len(data.paired)

    _write_js(out / "data" / "episodes.js", "CELLBENCH_EPISODES", [*EPISODE_COLUMNS, "links"], episode_rows)
    version_file.write_text(version + "\n")
    _write_js(out / "data" / "pairs.js", "CELLBENCH_PAIRS", [*PAIR_COLUMNS, "links"], pair_rows)
    figures = _copy_figures(Path(figures_dir) if figures_dir else None, out)
    summary.figures = len(figures)

    tables = {t.name: t for t in build_tables(data)}
    shown = [tables[name] for name in INDEX_TABLES if name in tables]
    js = (INDEX_JS.replace("__EPISODE_COLUMNS__", json.dumps(list(EPISODE_COLUMNS)))
          .replace("__PAIR_COLUMNS__", json.dumps(list(PAIR_COLUMNS))))
    figs = "".join(f'<a href="figures/{_e(n)}"><img src="figures/{_e(n)}" alt="{_e(n)}" loading="lazy"></a>'
                   for n in figures)
    toc = " · ".join(f'<a href="#table-{_e(t.name)}">{_e(t.name)}</a>' for t in shown)
    index.write_text(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>cellbench results</title>"
        f"<style>{VIEW_CSS}{INDEX_CSS}</style></head><body><main>"
        f"<h1>cellbench results</h1><p class=\"instr\">{summary.episodes} episodes, {summary.pairs} pairs "
        f"(instance x comparison). Dollars under the price table <code>{_e(price.model)}</code>.</p>"
        f'<h2>Episodes</h2><div id="episodes"></div>'
        f'<h2>Pairs: tool calling and code on the same instance</h2><div id="pairs"></div>'
        f"<h2>Tables</h2><p>{toc}</p>" + "".join(_report_table_html(t) for t in shown)
        + (f'<h2>Figures</h2><div class="figs">{figs}</div>' if figs else "")
        + '<script src="data/episodes.js"></script><script src="data/pairs.js"></script>'
        f"<script>{js}</script></main></body></html>\n")
    summary.seconds = time.perf_counter() - started
    return summary


def print_summary(summary: SiteSummary) -> None:
    print(f"browse: {summary.episodes} episodes ({summary.episode_pages_written} pages rewritten), "
          f"{summary.pairs} pair pages, {summary.figures} figures -> {summary.out / 'index.html'} "
          f"in {summary.seconds:.1f} s", file=sys.stderr)
