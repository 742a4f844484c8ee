"""Argument parsing shared by `sediment` and `sediment demo`: help that shows every
default, and value types whose errors read well (argparse names a type function in its
message when the function raises ValueError, e.g. "invalid _non_negative value")."""

from __future__ import annotations

import argparse
from collections.abc import Callable

FLAG_ACTIONS = (argparse._StoreTrueAction, argparse._StoreFalseAction)


class HelpFormatter(argparse.HelpFormatter):
    """Adds "(default: X)" to every option's help unless the help already says it; a
    flag's default is "off", a required option says "(required)". An option whose
    default is None says in words what it means (its help carries "default:")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.option_strings and action.required and "required" not in text:
            return f"{text} (required)".lstrip()
        if (action.default is argparse.SUPPRESS or not action.option_strings
                or "default" in text or "%(default)" in text or "required" in text):
            return text
        if isinstance(action, FLAG_ACTIONS):
            return f"{text} (default: off)"
        if action.default is None:
            return text
        return f"{text} (default: %(default)s)"


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=prog, description=description,
                                   formatter_class=HelpFormatter)


def int_at_least(low: int) -> Callable[[str], int]:
    """An integer >= low; "must be an integer >= 1, got 'x'" otherwise."""

    def convert(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be an integer >= {low}, got {text!r}") from None
        if n < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {n}")
        return n

    return convert


def positive_seconds(text: str) -> float:
    """A number of seconds > 0."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not x > 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return x


__all__ = ["HelpFormatter", "int_at_least", "parser", "positive_seconds"]
