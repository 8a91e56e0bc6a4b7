"""A progress bar on stderr: tqdm when it is installed, else one plain status line."""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    """Counts units of work; ``update(label)`` marks one done and shows what runs next."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total = total
        self.done = 0
        self.enabled = enabled
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

    def _write(self, label: str) -> None:
        if sys.stderr.isatty():
            sys.stderr.write(f"\r[{self.done}/{self.total}] {label}".ljust(60))
        else:
            sys.stderr.write(f"[{self.done}/{self.total}] {label}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled and sys.stderr.isatty():
            sys.stderr.write("\n")
