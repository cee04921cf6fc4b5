"""`episode.max_dollars`: end an episode (status `dollar_budget`) before a call would take its cost past a limit.

Each call is priced as it is made under the config's price table, with
analysis.cost's one formula (`CALL_DOLLARS_SQL`, evaluated by DuckDB on the
call's usage).  Before the next call, the episode stops once the dollars
spent plus the last call's dollars pass the limit: a prompt only grows
(until a compaction), so the next call costs about as much as the last one
at least, and stopping then is what keeps the bill under the limit rather
than just over it.  The first call is always made (nothing predicts it).
Both interfaces are held to it in the same way.
"""
from __future__ import annotations

from dataclasses import astuple

import duckdb

from agents.records import Usage


class DollarBudget:
    """The running cost of one episode's calls under one price table."""

    def __init__(self, limit: float, table):
        from analysis.cost import _PARAM_ROW_SQL, CALL_DOLLARS_SQL

        self.limit = float(limit)
        self.table = table
        self.spent = 0.0
        self.last = 0.0
        self._con = duckdb.connect()
        self._sql = (f"SELECT {CALL_DOLLARS_SQL} FROM (SELECT ?::BIGINT AS input_tokens, "
                     f"?::BIGINT AS cached_input_tokens, ?::BIGINT AS cache_write_tokens, "
                     f"?::BIGINT AS output_tokens) c CROSS JOIN ({_PARAM_ROW_SQL}) p")

    def dollars(self, usage: Usage) -> float:
        """One call's dollars under the table."""
        row = self._con.execute(self._sql, [usage.input_tokens, usage.cached_input_tokens, usage.cache_write_tokens,
                                            usage.output_tokens, *astuple(self.table)]).fetchone()
        return float(row[0])

    def add(self, usage: Usage) -> None:
        self.last = self.dollars(usage)
        self.spent += self.last

    def next_would_pass(self) -> bool:
        """Whether another call like the last would take the episode past the limit."""
        return self.spent + self.last > self.limit

    def reason(self) -> str:
        return (f"${self.spent:.4f} spent under {self.table.model}; the next call (about ${self.last:.4f}, "
                f"as the last) would pass max_dollars ${self.limit:g}")

    def close(self) -> None:
        self._con.close()
