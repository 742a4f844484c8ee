"""One progress bar across a whole sweep, and printing that never breaks it.

The bar counts runs, with the current run's progress as a fraction of one (from the
runner's phases: traffic time, then recovery and checks), so its rate and ETA are
meaningful from the first run on. Everything printed while it is open goes through
`SweepBar.write` (tqdm clears the bar, prints the line, redraws it), and `sediment.log`
hands its console lines to the same writer. Disabled (not a terminal, `--no-progress`),
nothing is drawn and writes are plain prints.
"""

from __future__ import annotations

import shutil
import sys
from types import TracebackType
from typing import Any, TextIO

from sediment.scenarios.runner import Progress, ProgressFn

TRAFFIC_SHARE = 0.9  # of a run's bar: the traffic; recovery and checks take the rest
PHASE_AT = {"recover": 0.9, "check": 0.95, "done": 1.0}
FALLBACK_SIZE = (100, 24)  # columns, lines


def run_fraction(p: Progress) -> float:
    """How much of one run is done, in [0, 1]."""
    if p.phase in PHASE_AT:
        return PHASE_AT[p.phase]
    return TRAFFIC_SHARE * min(p.t / p.duration, 1.0) if p.duration > 0 else 0.0


class SweepBar:
    """`with SweepBar(total_runs, enabled) as bar:` then `bar.run(label)` per run (its
    progress callback), `bar.finished()` after it, `bar.write(text)` for any output."""

    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.total = total
        self.enabled = enabled and total > 0
        self.stream = stream
        self.done = 0
        self._bar: Any = None
        self._ops = 0

    def __enter__(self) -> SweepBar:
        if self.enabled:
            from tqdm import tqdm  # type: ignore[import-untyped]

            # a terminal that reports no size (a pty nobody sized) gets a fixed one
            sized = min(shutil.get_terminal_size((0, 0))) > 0
            self._bar = tqdm(total=self.total, unit="run", file=self.stream, leave=False,
                             dynamic_ncols=sized, ncols=None if sized else FALLBACK_SIZE[0],
                             nrows=None if sized else FALLBACK_SIZE[1],
                             bar_format="{percentage:3.0f}%|{bar:20}| {n:.1f}/{total} runs "
                                        "[{elapsed}<{remaining}]{postfix}")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def run(self, label: str) -> ProgressFn:
        """The progress callback of the next run."""
        self._ops = 0

        def update(p: Progress) -> None:
            if self._bar is None:
                return
            self._ops = p.ops or self._ops
            self._bar.n = self.done + run_fraction(p)
            self._bar.set_postfix_str(f"{label}: {p.phase} t={p.t:.1f}s ops={self._ops}"[:70],
                                      refresh=False)
            self._bar.refresh()

        return update

    def finished(self) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.n = self.done
            self._bar.refresh()

    def write(self, text: str, err: bool = False) -> None:
        """Print `text` (stdout, or stderr with err) without breaking the bar."""
        target = self.stream or (sys.stderr if err else sys.stdout)
        if self._bar is None:
            print(text, file=target, flush=True)
            return
        from tqdm import tqdm

        tqdm.write(text, file=target)

    def write_log_line(self, line: str) -> None:
        """For `sediment.log.console_writer`: a log line, to stderr."""
        self.write(line, err=True)


__all__ = ["SweepBar", "run_fraction"]
