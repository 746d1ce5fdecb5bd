"""Progress display of a run, and the console lines of robotrl, through stdlib ``logging``.

:class:`Progress` counts a loop's clock (gradient updates / env steps off-policy,
iterations on-policy) towards its budget and shows the latest training metrics: a tqdm bar
on a terminal, and one summary line per ``every`` clock units (default: 5 % of the budget)
with the elapsed time and an ETA::

    [hopper bc] 1000/20000 (5%) step 1000 · 812.4/s · 0:00:01 elapsed · ETA 0:00:23 · loss 0.0213 · lr 0.0003

Every line goes to the logger ``robotrl.console`` (:func:`emit`). ``robotrl train`` configures
logging (``robotrl/configs/hydra/job_logging/robotrl.yaml``): a :class:`ConsoleHandler` shows
the lines as they are, above a live bar, and ``<run_dir>/cli.log`` keeps them with timestamps;
on a terminal the summary lines go to the file only (the bar shows them on screen), so the
log never holds the bar's ``\\r``-joined states. Without such a handler (robotrl used as a
library) the lines are printed to stdout, as before, and the log records go wherever the
application's logging sends them.
"""

from __future__ import annotations

import datetime
import logging
import sys
import time

log = logging.getLogger("robotrl.console")


class ConsoleHandler(logging.StreamHandler):
    """A stdout handler that writes above a live tqdm bar and skips file-only records
    (``extra={"file_only": True}``: progress summary lines while the bar shows them)."""

    def __init__(self, stream=None):
        super().__init__(stream if stream is not None else sys.stdout)

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "file_only", False):
            return
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=self.stream)
            self.flush()
        except Exception:  # noqa: BLE001  (logging's own convention: never raise from a handler)
            self.handleError(record)


def _shows_on_console(h: logging.Handler) -> bool:
    if isinstance(h, ConsoleHandler):
        return True
    return (type(h) is logging.StreamHandler and getattr(h, "stream", None) in (sys.stdout, sys.stderr)
            and h.level <= logging.INFO)


def _console_configured() -> bool:
    """Whether logging will show ``robotrl.console``'s INFO records on the console: a
    :class:`ConsoleHandler`, or a plain stdout/stderr ``StreamHandler`` (Hydra's ``stdout``
    job logging), on the logger's chain."""
    if not log.isEnabledFor(logging.INFO):
        return False
    logger: logging.Logger | None = log
    while logger is not None:
        if any(_shows_on_console(h) for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent  # type: ignore[assignment]
    return False


def emit(line: str, *, file_only: bool = False) -> None:
    """Show ``line`` on the console and log it (``robotrl.console``, level INFO).

    ``file_only``: a line the console shows otherwise (a progress bar's state): logged for
    the log files only, never shown twice.
    """
    configured = _console_configured()
    log.info(line, extra={"file_only": file_only})
    if not configured and not file_only:
        print(line, flush=True)


def _hms(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(max(seconds, 0))))


class Progress:
    """A progress display; a context manager.

    Args:
        total: the budget in clock units.
        initial: clock units already done (a resumed run).
        desc: the run's name.
        enabled: ``False``: show nothing.
        tty: show a bar (``True``) or summary lines only (``False``); ``None``: a bar when
            stderr is a terminal. Summary lines are logged either way (to the log file only
            while a bar shows the progress).
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
        if self._bar is not None and n > before:
            self._bar.update(n - before)
        if self.enabled and n // self.every > before // self.every:
            self._summary_line(step)

    def metrics(self, metrics: dict) -> None:
        """Show the first three of the latest training ``metrics`` (floats or 0-d tensors)."""
        shown = {k: f"{float(v):.3g}" for k, v in list(metrics.items())[:3]}
        if self._bar is not None:
            self._bar.set_postfix(shown)
        self._last = shown

    def summary(self, step: int) -> str:
        """The summary line: clock / budget, step, rate since the start (clock units per
        second), elapsed time, ETA at that rate, metrics."""
        pct = f" ({100 * self.n // self.total}%)" if self.total else ""
        elapsed = max(time.time() - self._t, 1e-9)
        rate = (self.n - self._n0) / elapsed
        eta = _hms((self.total - self.n) / rate) if rate > 0 else "?"
        parts = [f"[{self.desc}] {self.n}/{self.total}{pct} step {step}", f"{rate:.1f}/s",
                 f"{_hms(elapsed)} elapsed", f"ETA {eta}", *(f"{k} {v}" for k, v in self._last.items())]
        return " · ".join(parts)

    def _summary_line(self, step: int) -> None:
        emit(self.summary(step), file_only=self._bar is not None)

    def write(self, line: str) -> None:
        """Show and log ``line`` without breaking the display."""
        if self._bar is not None and not _console_configured():
            self._bar.write(line)
            log.info(line)
        else:
            emit(line)

    def close(self) -> None:
        """End the display."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class LineBar:
    """tqdm's ``update`` / ``set_postfix`` / ``close`` for a console that is not a terminal: instead of a bar's
    ``\\r``-joined states, one line per ``every`` units (default: 5 % of ``total``) and one at the end, with the
    rate, the elapsed time and an ETA, through :func:`emit` (so ``cli.log`` keeps them)::

        [collect robotrl/pointmaze/umaze-slow-v1] 1000/5000 (20%) · 1290.3 step/s · 0:00:00 elapsed · ETA 0:00:03

    Args:
        total: units to do; desc: the task's name; unit: the unit's name in the rate.
        enabled: ``False``: show nothing.
        every: units between lines (``None``: 5 % of ``total``, at least 1).
    """

    def __init__(self, total: int, desc: str, unit: str = "step", enabled: bool = True, every: int | None = None):
        self.total, self.desc, self.unit, self.enabled = int(total), desc, unit, enabled
        self.every = max(1, int(every) if every is not None else self.total // 20)
        self.n, self._t, self._post = 0, time.time(), {}  # type: tuple[int, float, dict]
        self._last_line = -1

    def line(self) -> str:
        """The progress line: done / total, rate since the start, elapsed time, ETA at that rate, postfix."""
        pct = f" ({100 * self.n // self.total}%)" if self.total else ""
        elapsed = max(time.time() - self._t, 1e-9)
        rate = self.n / elapsed
        eta = _hms((self.total - self.n) / rate) if rate > 0 else "?"
        parts = [f"[{self.desc}] {self.n}/{self.total}{pct}", f"{rate:.1f} {self.unit}/s", f"{_hms(elapsed)} elapsed",
                 f"ETA {eta}", *(f"{k} {v}" for k, v in self._post.items())]
        return " · ".join(parts)

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        before, self.n = self.n, self.n + int(n)
        if self.enabled and (self.n // self.every > before // self.every or (self.n >= self.total > before)):
            self._last_line = self.n
            emit(self.line())

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True, **kwargs) -> None:
        """Values shown at the end of the next lines (tqdm's signature)."""
        self._post.update(ordered_dict or {}, **kwargs)

    def close(self) -> None:
        """A last line when the last update was not shown."""
        if self.enabled and self.n != self._last_line and self.n > 0:
            self._last_line = self.n
            emit(self.line())


def progress_bar(total: int, desc: str, enabled: bool = True, unit: str = "step", tty: bool | None = None):
    """A progress display of ``total`` units: a tqdm bar on a terminal, else a :class:`LineBar` (lines with an ETA
    instead of the bar's ``\\r`` states in a non-terminal log); both take ``update``, ``set_postfix`` and ``close``.

    ``tty``: ``None`` asks whether stderr is a terminal.
    """
    tty = sys.stderr.isatty() if tty is None else tty
    if enabled and tty:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True)
    return LineBar(total, desc, unit=unit, enabled=enabled)
