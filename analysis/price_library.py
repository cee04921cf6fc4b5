"""Price tables a user does not have to type: the config's `prices`, else the `genai-prices` library.

`genai-prices` (pinned in pyproject.toml) bundles its price data, so a lookup
runs offline.  Its coverage, checked for this pin: input, cache read, cache
write (Anthropic's 1.25x five-minute write; OpenAI models have none, so a
write there bills as input) and output per million tokens, and long-context
tiers as thresholds that re-price the whole call (Anthropic's 200k, Gemini's
200k, GPT-6 Astra's 272k), which is analysis.cost's own model.  One
`PriceTable` has one input-side multiplier, so a model whose input, cache-read
and cache-write tiers scale differently is refused rather than approximated.
Open models served locally (qwen3, llama) are not in it: give them a
`prices:` entry.

Every table says where it came from (`TableSource`), for the report.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from agents.errors import CellbenchError
from analysis.cost import PriceTable, price_tables


@dataclass(frozen=True)
class TableSource:
    table: PriceTable
    origin: str
    """'config' or 'genai-prices <version> (<provider>/<model id>)'."""


#: Where each table the library built came from (tables are frozen, so they are their own keys).
_ORIGINS: dict[PriceTable, str] = {}


def origin_of(table: PriceTable) -> str:
    """'genai-prices <version> (<provider>/<model>)' for a table the library built, else 'config'."""
    return _ORIGINS.get(table, "config")


def resolve_price_table(config: dict[str, Any], name: str) -> TableSource:
    """The price table `name`: the config's own entry if it has one, else the price library's."""
    tables = price_tables(config)
    if name in tables:
        return TableSource(tables[name], origin_of(tables[name]))
    return library_table(name, known=sorted(tables))


def library_table(model: str, known: list[str] = ()) -> TableSource:
    """`model`'s list prices from genai-prices, as a PriceTable."""
    import genai_prices
    from genai_prices import data_snapshot

    try:
        provider, info = data_snapshot.get_snapshot().find_provider_model(model, None, None, None)
    except LookupError:
        also = f"; the config's tables: {', '.join(known)}" if known else ""
        raise CellbenchError(f"no price table for {model!r}: not in the config's prices and not in "
                             f"genai-prices {genai_prices.__version__}{also}") from None
    prices = info.get_prices(datetime.now(timezone.utc))
    origin = f"genai-prices {genai_prices.__version__} ({provider.id}/{info.id})"
    table = _table(model, prices, origin)
    _ORIGINS[table] = origin
    return TableSource(table, origin)


def _table(model: str, prices: Any, origin: str) -> PriceTable:
    def get(key: str):
        return getattr(prices, key, None)

    inp, out = get("input_mtok"), get("output_mtok")
    if inp is None or out is None:
        raise CellbenchError(f"{origin}: no per-token input/output price for {model!r}")
    read, write = get("cache_read_mtok"), get("cache_write_mtok")
    bases = {"input": _base(inp), "cached_input": _base(read if read is not None else inp),
             "cache_write": _base(write if write is not None else inp), "output": _base(out)}
    threshold, ratios = None, {}
    for key, value in (("input", inp), ("cached_input", read), ("cache_write", write), ("output", out)):
        if value is None or not hasattr(value, "tiers"):
            continue
        if len(value.tiers) != 1:
            raise CellbenchError(f"{origin}: {model} has {len(value.tiers)} price tiers; one is supported")
        tier = value.tiers[0]
        if threshold not in (None, tier.start):
            raise CellbenchError(f"{origin}: {model}'s tiers start at different sizes")
        threshold = tier.start
        ratios[key] = tier.price / value.base if value.base else Decimal(1)
    listed = {"input": inp, "cached_input": read, "cache_write": write}
    input_side = {ratios.get(k, Decimal(1)) for k, v in listed.items() if v is not None}
    if threshold is not None and len(input_side) > 1:
        raise CellbenchError(f"{origin}: {model}'s input-side prices change by different factors above "
                             f"{threshold} tokens; give it a prices: entry")
    return PriceTable(
        model=model, **bases,
        long_context_threshold=threshold,
        long_context_input_multiplier=float(next(iter(input_side))) if threshold is not None else 1.0,
        long_context_output_multiplier=float(ratios.get("output", 1)) if threshold is not None else 1.0,
    )


def _base(value: Any) -> float:
    return float(value.base if hasattr(value, "tiers") else value)
