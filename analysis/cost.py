"""Dollar cost of LLM calls under a price table from config (paper App. E); any trace re-prices under any table.

Config shape (one table per model, $ per million tokens; schema in
workflow/schemas/config.schema.yaml)::

    price_model: gpt-6-astra
    prices:
      gpt-6-astra: {input: 10, cached_input: 1, cache_write: 12.5, output: 50,
                    long_context_threshold: 272000, long_context_input_multiplier: 2,
                    long_context_output_multiplier: 1}

Per call: ``uncached*input + cached*cached_input + write*cache_write +
output*output`` with ``uncached = input_tokens - cached - write`` (the trace's
`input_tokens` includes cached and cache-write tokens).  A call whose
`input_tokens` exceeds `long_context_threshold` has its input-side prices
multiplied by `long_context_input_multiplier` and its output price by
`long_context_output_multiplier` -- for the whole call, as providers bill it.
A table without `cache_write` bills cache writes at its `input` price (a
written token is an input token the provider processed), never at zero.

The formula exists once, as SQL (`CALL_DOLLARS_SQL`): the database's views and
the report both evaluate it, the report with the table passed as parameters.
"""
from __future__ import annotations

from dataclasses import astuple, dataclass, field, fields
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from agents.errors import CellbenchError


@dataclass(frozen=True)
class PriceTable:
    """One model's list prices, dollars per million tokens: a `prices` entry of a validated config.

    The fields are the keys of `price_table` in workflow/schemas/config.schema.yaml,
    which also holds their defaults (filled in by agents.config.load_config).
    """

    model: str
    input: float
    """Uncached input tokens."""
    cached_input: float
    """Input tokens read from the provider's prefix cache."""
    cache_write: float | None = field(default=None, kw_only=True)
    """Input tokens written to the cache; None (a table that leaves it out): the input price, never zero."""
    output: float
    """Output tokens, reasoning included."""
    long_context_threshold: int | None
    """A call with more input tokens than this is billed at the multipliers below (None: no tier)."""
    long_context_input_multiplier: float
    long_context_output_multiplier: float

    def __post_init__(self):
        if self.cache_write is None:
            # A written token was sent as input; billing it at $0 would make caching look free.
            object.__setattr__(self, "cache_write", self.input)


PRICE_COLUMNS = tuple(f.name for f in fields(PriceTable))

#: Dollars of one call: `c` is a `calls` row, `p` a price row with PRICE_COLUMNS.
CALL_DOLLARS_SQL = """(
    ((c.input_tokens - c.cached_input_tokens - c.cache_write_tokens) * p.input
      + c.cached_input_tokens * p.cached_input
      + c.cache_write_tokens * p.cache_write)
    * (CASE WHEN c.input_tokens > p.long_context_threshold THEN p.long_context_input_multiplier ELSE 1 END)
    + c.output_tokens * p.output
    * (CASE WHEN c.input_tokens > p.long_context_threshold THEN p.long_context_output_multiplier ELSE 1 END)
) / 1e6"""

_PARAM_ROW_SQL = "SELECT " + ", ".join(
    f"?::{'BIGINT' if name == 'long_context_threshold' else 'VARCHAR' if name == 'model' else 'DOUBLE'} AS {name}"
    for name in PRICE_COLUMNS)


def load_config(path: str | Path) -> dict[str, Any]:
    """The project config, validated and with its defaults filled in (agents.config)."""
    from agents.config import load_config as load_project_config

    return load_project_config(path)


def price_tables(config: dict[str, Any], source: str = "config") -> dict[str, PriceTable]:
    """Every price table of a validated config's `prices` section, and price_model's if only the
    price library (analysis.price_library) has it."""
    tables = {}
    for model, entry in (config.get("prices") or {}).items():
        try:
            tables[str(model)] = PriceTable(model=str(model), **entry)
        except TypeError as e:
            raise CellbenchError(f"{source}: prices.{model}: {e} (is the config validated?)") from None
    named = config.get("price_model")
    if tables and named and named not in tables:
        from analysis.price_library import library_table

        tables[named] = library_table(named, known=sorted(tables)).table
    return tables


def choose_price_table(config: dict[str, Any], requested: str | None, source: str = "config") -> PriceTable:
    """The table named by `requested` (``--price``), else by the config's `price_model`."""
    tables = price_tables(config, source)
    name = requested or config.get("price_model")
    if not tables:
        raise CellbenchError(f"{source} has no `prices` section: nothing to bill under")
    if name is None:
        if len(tables) == 1:
            return next(iter(tables.values()))
        raise CellbenchError(f"{source} sets no `price_model`; pass --price, one of {sorted(tables)}")
    if name not in tables:
        from analysis.price_library import library_table

        try:
            return library_table(name).table  # not in the config: the offline price library's list prices
        except CellbenchError as e:
            raise CellbenchError(f"unknown price model {name!r}; known: {', '.join(sorted(tables))} ({e})") from None
    return tables[name]


def call_dollars(con: duckdb.DuckDBPyConnection, table: PriceTable, columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """(trace_dir, call_index, *columns, dollars) of every call in the database, billed under `table`."""
    extra = "".join(f", c.{name}" for name in columns)
    return con.execute(
        f"SELECT c.trace_dir, c.call_index{extra}, {CALL_DOLLARS_SQL} AS dollars "
        f"FROM calls c CROSS JOIN ({_PARAM_ROW_SQL}) p ORDER BY c.trace_dir, c.call_index",
        list(astuple(table)),
    ).df()
