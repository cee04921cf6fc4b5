"""How the code agent's cells were confined: episodes per sandbox layer.

Read from each episode's `sandbox` record (agents/sandbox.py writes it into
episode.json: one true/false per layer, the mode, the Landlock ABI).  Tool
calling runs no cell worker and has no record; traces older than the sealed
cells have none either, and count as `no_record`.
"""
from __future__ import annotations

import json

import pandas as pd

from agents.sandbox import LAYERS

COLUMNS = ["layer", "n_code_episodes", "n_applied", "n_not_applied", "n_no_record", "applied_pct"]
COLUMN_DOCS = {
    "layer": "confinement layer of the cell worker (README Isolation)",
    "n_code_episodes": "code-agent episodes",
    "n_applied": "episodes whose cell worker had the layer",
    "n_not_applied": "episodes whose cell worker ran without it",
    "n_no_record": "episodes with no sandbox record (traces from before sealed cells)",
    "applied_pct": "share of the recorded episodes with the layer (%)",
}


def _record(value) -> dict | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def sandbox_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """One row per layer: in how many code-agent episodes it was applied."""
    code = episodes[episodes["agent"] == "code"] if len(episodes) else episodes
    n = len(code)
    records = [_record(v) for v in code["sandbox"]] if n and "sandbox" in code else [None] * n
    known = [r for r in records if r is not None]
    rows = []
    for layer in LAYERS:
        applied = sum(1 for r in known if r.get(layer) is True)
        rows.append(dict(layer=layer, n_code_episodes=n, n_applied=applied, n_not_applied=len(known) - applied,
                         n_no_record=n - len(known),
                         applied_pct=100.0 * applied / len(known) if known else float("nan")))
    return pd.DataFrame(rows, columns=COLUMNS)
