"""Ctrl-C during a tuning run, noted by a flag that the main thread's waits check, not raised wherever it lands.

CPython raises KeyboardInterrupt at whatever line the main thread runs when SIGINT arrives. Where that line is in
a finalizer (a `__del__`, a weakref callback: SQLAlchemy's connection pool, behind an RDB study, returns connections
in them) the exception is printed as "Exception ignored in ..." and lost, and the run would go on to its end as if
never interrupted (tests/test_tuning_ctrl_c.py shows Python doing so). So while a run waits for its threads, SIGINT
only sets a flag (`pressed`); `check`, called by those waits, raises KeyboardInterrupt where the run handles it. A
second Ctrl-C raises at once, wherever it lands (a run that does not stop must not need kill).
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class CtrlC:
    """Whether SIGINT arrived while `noted` was active."""

    def __init__(self) -> None:
        self.pressed = threading.Event()

    def check(self) -> None:
        """Raise KeyboardInterrupt if Ctrl-C was pressed (here, in the caller's frame, not in a finalizer)."""
        if self.pressed.is_set():
            raise KeyboardInterrupt

    def _on_sigint(self, signum, frame) -> None:
        if self.pressed.is_set():
            raise KeyboardInterrupt
        self.pressed.set()


@contextlib.contextmanager
def noted(ctrl_c: CtrlC) -> Iterator[CtrlC]:
    """SIGINT sets `ctrl_c.pressed` inside the block. Only where Python's own handler is installed and this is the
    main thread: a handler the caller installed (or SIGINT ignored) is left as it is, and `check` never raises."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield ctrl_c
        return
    previous = signal.signal(signal.SIGINT, ctrl_c._on_sigint)
    try:
        yield ctrl_c
    finally:
        signal.signal(signal.SIGINT, previous)
