"""Progress display of a run: a tqdm bar on a terminal, summary lines in a log file.

:class:`Progress` counts a loop's clock (gradient updates / env steps off-policy,
iterations on-policy) towards its budget and shows the latest training metrics. When
stderr (the bar's stream) is not a terminal — output piped or redirected to a log file —
a bar would write a line per refresh; instead one summary line per ``every`` clock units
(default: 5 % of the budget) goes to stdout::

    [hopper bc] 1000/20000 (5%) step 1000 · 812.4/s · loss 0.0213 · lr 0.0003
"""

from __future__ import annotations

import sys
import time


class Progress:
    """A progress display; a context manager.

    Args:
        total: the budget in clock units.
        initial: clock units already done (a resumed run).
        desc: the run's name.
        enabled: ``False``: show nothing.
        tty: show a bar (``True``) or summary lines (``False``); ``None``: a bar when stderr
            is a terminal.
        every: clock units between summary lines (``None``: 5 % of ``total``, at least 1).
    """

    def __init__(self, total: int, initial: int = 0, desc: str = "train", enabled: bool = True,
                 tty: bool | None = None, every: int | None = None):
        self.total, self.n, self.desc, self.enabled = int(total), int(initial), desc, enabled
        self.every = max(1, int(every) if every is not None else self.total // 20)
        self._bar, self._last = None, {}
        self._t, self._n0 = time.time(), self.n
        tty = sys.stderr.isatty() if tty is None else tty
        if enabled and tty:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, initial=self.n, desc=desc, dynamic_ncols=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int, step: int) -> None:
        """The clock is at ``n`` units (``step``: the run's step, shown in summary lines)."""
        before, self.n = self.n, int(n)
        if self._bar is not None:
            if n > before:
                self._bar.update(n - before)
        elif self.enabled and n // self.every > before // self.every:
            self._summary_line(step)

    def metrics(self, metrics: dict) -> None:
        """Show the first three of the latest training ``metrics`` (floats or 0-d tensors)."""
        shown = {k: f"{float(v):.3g}" for k, v in list(metrics.items())[:3]}
        if self._bar is not None:
            self._bar.set_postfix(shown)
        self._last = shown

    def _summary_line(self, step: int) -> None:
        """One line: clock / budget, step, rate since the start (clock units per second), metrics."""
        pct = f" ({100 * self.n // self.total}%)" if self.total else ""
        rate = (self.n - self._n0) / max(time.time() - self._t, 1e-9)
        parts = [f"[{self.desc}] {self.n}/{self.total}{pct} step {step}", f"{rate:.1f}/s",
                 *(f"{k} {v}" for k, v in self._last.items())]
        print(" · ".join(parts), flush=True)

    def write(self, line: str) -> None:
        """Print ``line`` without breaking the display."""
        if self._bar is not None:
            self._bar.write(line)
        else:
            print(line, file=sys.stdout, flush=True)

    def close(self) -> None:
        """End the display."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
