"""Operating guides: per-benchmark Markdown notes on how to drive the robot with these primitives.

A guide is packaged data (`robots/guides/<benchmark>.md`); the episode puts
its text on the task card unless the ablation removes guides.
"""
from __future__ import annotations

from importlib import resources


def load_guide(benchmark: str) -> str | None:
    """The operating guide for a benchmark family (e.g. 'libero_pro'), or None when it has none."""
    if not benchmark or not all(c.isalnum() or c == "_" for c in benchmark):
        return None
    path = resources.files(__package__).joinpath(f"{benchmark}.md")
    return path.read_text(encoding="utf-8") if path.is_file() else None
