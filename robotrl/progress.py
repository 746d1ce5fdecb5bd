"""Progress display of a run: a tqdm bar on a terminal.

:class:`Progress` counts a loop's clock (gradient updates / env steps off-policy,
iterations on-policy) towards its budget and shows the latest training metrics.
"""

from __future__ import annotations

import sys


class Progress:
    """A progress display; a context manager.

    Args:
        total: the budget in clock units.
        initial: clock units already done (a resumed run).
        desc: the run's name.
        enabled: ``False``: show nothing.
    """

    def __init__(self, total: int, initial: int = 0, desc: str = "train", enabled: bool = True):
        self.total, self.n, self.desc, self.enabled = int(total), int(initial), desc, enabled
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, initial=self.n, desc=desc, dynamic_ncols=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int, step: int) -> None:
        """The clock is at ``n`` units (``step``: the run's step, shown in summary lines)."""
        if self._bar is not None and n > self.n:
            self._bar.update(n - self.n)
        self.n = int(n)

    def metrics(self, metrics: dict) -> None:
        """Show the first three of the latest training ``metrics`` (floats or 0-d tensors)."""
        if self._bar is not None:
            self._bar.set_postfix({k: f"{float(v):.3g}" for k, v in list(metrics.items())[:3]})

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
