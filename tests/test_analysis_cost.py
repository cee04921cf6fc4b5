"""Call cost under config price tables: cache reads and writes, the long-context tier, re-pricing."""
from __future__ import annotations

import duckdb
import pytest

from agents.errors import CellbenchError
from analysis.cost import call_dollars, choose_price_table, load_config, price_tables
from analysis.ingest import ingest_traces
from trace_factory import call, write_config, write_episode

# astra ($/M): input 10, cached 1, cache write 12.5, output 50; above 272k input tokens the
# input side x2 and the output x1.5 (tests/trace_factory.py).
CALLS = [
    # A: uncached = 100k - 60k - 10k = 30k.
    #    30k*10 + 60k*1 + 10k*12.5 = 300k + 60k + 125k = 485k -> $0.485; output 2k*50 = $0.100. Total $0.585.
    call(1, 100_000, cached=60_000, write=10_000, output=2_000),
    # B: 300k > 272k: uncached 100k*10 + cached 200k*1 = 1.2M -> $1.2, x2 = $2.4;
    #    output 1k*50 = $0.05, x1.5 = $0.075. Total $2.475.
    call(2, 300_000, cached=200_000, write=0, output=1_000),
    # C: exactly at the threshold is not above it: 272k*10 = $2.72, no multiplier.
    call(3, 272_000, cached=0, write=0, output=0),
]


@pytest.fixture
def priced_db(tmp_path):
    root = tmp_path / "episodes"
    write_episode(root, agent="tool", calls=CALLS)
    config = load_config(write_config(tmp_path / "config.yaml"))
    db = tmp_path / "t.duckdb"
    ingest_traces(root, db, prices=(price_tables(config), config["price_model"]))
    return db, config


def test_call_cost_with_cache_and_long_context(priced_db):
    db, config = priced_db
    with duckdb.connect(str(db), read_only=True) as con:
        # The database's own view bills under the config's price_model (astra).
        view = con.execute("SELECT dollars FROM call_dollars ORDER BY call_index").fetchall()
        assert [d for (d,) in view] == pytest.approx([0.585, 2.475, 2.72])
        assert con.execute("SELECT dollars FROM instances").fetchall()[0][0] == pytest.approx(0.585 + 2.475 + 2.72)
        # Re-priced under `cheap` (input 1, cached 0.1, cache write left out: billed at the input price 1,
        # output 5):
        # A: 30k*1 + 60k*0.1 + 10k*1 = 46k -> $0.046, + 2k*5 = $0.010: $0.056.
        # B: no long-context tier: 100k*1 + 200k*0.1 = 120k -> $0.12, + 1k*5 = $0.005: $0.125.
        # C: 272k*1 = $0.272.
        cheap = call_dollars(con, choose_price_table(config, "cheap"))
        assert list(cheap["dollars"]) == pytest.approx([0.056, 0.125, 0.272])
        # The database's prices table (what the views bill under) holds the same filled-in price.
        assert con.execute("SELECT cache_write FROM prices WHERE model = 'cheap'").fetchall() == [(1.0,)]


def test_shipped_openai_tables_bill_cache_writes_as_input():
    """OpenAI has no cache-write premium: a written token costs what an input token costs, not $0."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for path in (root / "config.yaml", root / "configs" / "paper.yaml"):
        tables = price_tables(load_config(path))
        for model in ("gpt-4.1", "gpt-4o"):
            assert tables[model].cache_write == tables[model].input, (path.name, model)


def test_price_model_choice(priced_db):
    _, config = priced_db
    assert choose_price_table(config, None).model == "astra"
    with pytest.raises(CellbenchError, match="unknown price model 'gpt-9'; known: astra, cheap, flat"):
        choose_price_table(config, "gpt-9")
