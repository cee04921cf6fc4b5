"""Paired bootstrap over instances with tasks resampled as clusters, vectorised over the resamples.

The seeds (and repeats) of one task share its scene and its instruction, so
they are not independent draws: the unit drawn with replacement is the task
(benchmark, task), and every instance of a drawn task comes along.  Both
agents' episodes of an instance stay together (the bootstrap is paired).

Every statistic here is a function of totals over instances (successes,
calls, tokens, dollars, counts), so one resample is a vector of cluster
weights: with W the (resamples x clusters) multinomial draw counts and S the
(clusters x columns) per-cluster sums, W @ S holds every resample's totals at
once -- no Python loop per resample (the draws are made in chunks only to
bound memory when there are many clusters).  Intervals are percentile
intervals of the resampled statistic.  Settings come from config
(`analysis.bootstrap_resamples`, `analysis.bootstrap_seed`,
`analysis.confidence`); each table row draws from its own generator keyed on
the seed and the row's label, so a row's interval does not depend on which
other rows the database holds.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

#: Draw counts held at once (resamples x clusters): bounds memory on grids with very many tasks.
_CHUNK_CELLS = 4_000_000


@dataclass(frozen=True)
class Bootstrap:
    """How intervals are drawn: the `analysis` section of a validated config."""

    resamples: int = 2000
    seed: int = 0
    confidence: float = 0.95

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> "Bootstrap":
        section = (config or {}).get("analysis") or {}
        default = cls()
        return cls(resamples=int(section.get("bootstrap_resamples", default.resamples)),
                   seed=int(section.get("bootstrap_seed", default.seed)),
                   confidence=float(section.get("confidence", default.confidence)))

    def note(self) -> str:
        """One line for a table: what its intervals are."""
        return (f"Intervals (_ci_low/_ci_high, delta_boot_*): {100 * self.confidence:g}% paired bootstrap over "
                f"instances, tasks resampled as clusters (a task's seeds and repeats move together, both "
                f"agents' episodes stay paired); {self.resamples:,} resamples, seed {self.seed}, percentile "
                "intervals.")

    def totals(self, clusters: np.ndarray, columns: Mapping[str, np.ndarray], label: str) -> dict[str, np.ndarray]:
        """Every column's total over the instances in each resample: {name: array of length `resamples`}.

        `clusters`: one cluster index (0..k-1) per instance; `columns`: one
        value per instance for each named column.
        """
        clusters = np.asarray(clusters, dtype=np.int64)
        k = int(clusters.max()) + 1 if clusters.size else 0
        if k == 0:
            return {name: np.full(self.resamples, np.nan) for name in columns}
        sums = np.column_stack([np.bincount(clusters, weights=np.asarray(v, dtype=float), minlength=k)
                                for v in columns.values()])
        rng = np.random.default_rng([self.seed, zlib.crc32(label.encode())])
        out = np.empty((self.resamples, sums.shape[1]))
        chunk = max(1, _CHUNK_CELLS // k)
        p = np.full(k, 1.0 / k)
        for start in range(0, self.resamples, chunk):
            n = min(chunk, self.resamples - start)
            out[start:start + n] = rng.multinomial(k, p, size=n) @ sums
        return dict(zip(columns, out.T))

    def interval(self, values: np.ndarray) -> tuple[float, float]:
        """Percentile interval of a resampled statistic (resamples where it is undefined are left out)."""
        finite = values[np.isfinite(values)]
        if finite.size == 0:
            return float("nan"), float("nan")
        tail = (1 - self.confidence) / 2
        low, high = np.quantile(finite, [tail, 1 - tail])
        return float(low), float(high)


def cluster_ids(rows: pd.DataFrame) -> np.ndarray:
    """The cluster (benchmark, task) of each instance row, as indices 0..k-1."""
    return pd.factorize(rows["benchmark"].astype(str) + "\x1f" + rows["task"].astype(str))[0]


def divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Elementwise ratio, NaN where the denominator is 0 (a resample with nothing to divide by)."""
    out = np.full(np.shape(numerator), np.nan)
    np.divide(numerator, denominator, out=out, where=np.asarray(denominator) != 0)
    return out
