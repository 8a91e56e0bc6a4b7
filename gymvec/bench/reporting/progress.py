"""A progress bar on stderr: tqdm when it is installed, else one plain status line."""

from __future__ import annotations

import sys
import time
from typing import Any


class Progress:
    """Counts units of work; ``update(label)`` marks one done and shows what runs next."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total = total
        self.done = 0
        self.enabled = enabled
        self.started = time.monotonic()
        self._bar: Any = None
        # tqdm redraws with carriage returns, which clutter a log; a log gets plain lines.
        if not enabled or not sys.stderr.isatty():
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        # No monitor thread: the bench forks worker processes while the bar is open.
        tqdm.monitor_interval = 0
        self._bar = tqdm(total=total, file=sys.stderr, unit="run", dynamic_ncols=True)

    def describe(self, label: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_description_str(label)
        else:
            self._write(label)

    def update(self) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.update(1)

    def eta(self) -> str:
        """The time left at the pace so far (tqdm shows its own)."""
        if not self.done:
            return "ETA ?"
        left = (time.monotonic() - self.started) / self.done * (self.total - self.done)
        minutes, seconds = divmod(round(left), 60)
        return f"ETA {minutes}:{seconds:02d}"

    def _write(self, label: str) -> None:
        status = f"[{self.done}/{self.total}, {self.eta()}] {label}"
        if sys.stderr.isatty():
            sys.stderr.write(f"\r{status}".ljust(72))
        else:
            sys.stderr.write(f"{status}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled and sys.stderr.isatty():
            sys.stderr.write("\n")
