"""Markdown helpers of the evidence report sections (RQ4, Table 1, RQ2 on real data)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["md_table", "verdict"]


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A pipe table; floats with 4 significant digits."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(ok: bool | None) -> str:
    """``**yes**`` / ``**no**`` / ``n/a``."""
    return {True: "**yes**", False: "**no**", None: "n/a"}[ok]
