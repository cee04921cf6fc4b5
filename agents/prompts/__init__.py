"""The two interfaces' prompts, kept as data (YAML) beside the code."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml


@lru_cache(maxsize=None)
def load_prompts(agent: str) -> dict[str, str]:
    return yaml.safe_load((Path(__file__).parent / f"{agent}_agent.yaml").read_text())
