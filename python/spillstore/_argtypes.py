"""Argument types shared by the subcommands of ``python -m spillstore``: each parses one
command-line value or raises :class:`argparse.ArgumentTypeError`, which argparse turns into a
usage error (exit status 2)."""

from __future__ import annotations

import argparse

__all__ = ["non_negative_int", "parse_option", "positive_float", "positive_int"]


def parse_option(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` (a spillstore option) as ``(NAME, VALUE)``, both stripped."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def positive_int(text: str) -> int:
    """An integer above 0."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An integer of 0 or more."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    """A number above 0."""
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value
