"""spillstore's version, read from the package's VERSION file (the one place it is written)."""

from pathlib import Path

__all__ = ["__version__"]

__version__: str = (Path(__file__).resolve().parent / "VERSION").read_text(encoding="utf-8").strip()
