"""DuckDB ingest of episode traces, the paper's analyses, tables, figures and SQL."""
