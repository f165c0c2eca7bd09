"""A study's threads and what the user sees while they run: one daemon thread per GPU worker (`start`),
waited for by the main thread (`wait`), which meanwhile turns the threads' events into progress (a rich
bar on a terminal, plain lines otherwise: `_drain`); the first and last lines of a run (`say_start`,
`final_message`).

Events (put on the study's `events` queue by the trial loop and the re-timing):
    ("trial", number, config_id, status, value, reason, done, new, elapsed_s, config)
    ("duplicate", number, config_id, value)
    ("retime", number, config_id, value[, (shape, dtype)])
"""
from __future__ import annotations

import queue
import sys
import threading

from .settings import _t
from .template import shape_str


class _Progress:
    """Threads and progress of one study (`study` is its `_Study`)."""

    def __init__(self, study):
        self.st = study

    def say_start(self, counted: int) -> None:
        st = self.st
        st.tn._say(f"tuning {st.spec.name} on {st.device} x{len(st.workers)}: study {st.name} "
                   f"({st.storage_desc}), {counted}/{st.budget} trials done, sampler "
                   f"{_t(st.spec, 'sampler', 'tpe')}, objective {st.tn.objective}")

    def final_message(self) -> str:
        st, s = self.st, self.st.summary
        lines = [f"{st.spec.name}: {s.trials}/{st.budget} trials in study {st.name} (stopped: {s.stopped}); "
                 f"this run measured {s.measured} jobs, reused {s.reused}, duplicates {s.duplicates}, "
                 f"{s.rows_written} rows"]
        if s.retime_skipped:
            lines.append(f"re-timing stopped at the time limit ({st.time_limit:g} s): {s.retime_skipped} of its "
                         f"configs keep their first timings")
        if s.best_config_id:
            lines.append(f"best: {s.best_config_id} = {s.best_value:.4g} (trial {s.best_trial})")
        return "\n".join(lines)

    def start(self, target, name: str) -> list[threading.Event]:
        """One daemon thread per GPU worker running target(worker); each sets its Event when it ends.
        The events, not Thread.join, say when a thread is done: on Python 3.11 a Ctrl-C that lands in
        Thread.join marks a still-running thread as stopped, so a later join would not wait for it to
        tell its trials failed (and the study would keep RUNNING trials)."""
        events = []
        for w in self.st.workers:
            done = threading.Event()

            def run(w=w, done=done):
                try:
                    target(w)
                finally:
                    done.set()
            threading.Thread(target=run, daemon=True, name=f"{name}{w.device_index}").start()
            events.append(done)
        return events

    def wait(self, threads: list[threading.Event], bar: bool = True) -> None:
        """Wait for the threads, showing progress (rich on a terminal, plain lines otherwise)."""
        st = self.st
        want_bar, bar = bar, None
        if want_bar and st.tn.progress and sys.stdout.isatty():
            try:
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeRemainingColumn,
                )
                bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                               TimeRemainingColumn(), TextColumn("{task.fields[best]}"), transient=False)
            except ImportError:
                bar = None
        task = None
        if bar is not None:
            bar.start()
            task = bar.add_task(st.spec.name, total=st.budget, completed=st.summary.trials, best="")
        try:
            while not all(done.is_set() for done in threads):
                next(d for d in threads if not d.is_set()).wait(0.1)
                self._drain(bar, task)
                st.ctrl_c.check()                       # Ctrl-C raises here (interrupt.py says why)
            self._drain(bar, task)
        finally:
            if bar is not None:
                bar.stop()

    def _drain(self, bar, task) -> None:
        st = self.st
        while True:
            try:
                ev = st.events.get_nowait()
            except queue.Empty:
                return
            if not st.tn.progress:
                continue
            best = self._best_so_far()
            best_s = f"best {best:.4g}" if best is not None else "best -"
            if bar is not None:
                if ev[0] == "trial" and ev[3] != "pruned":
                    bar.update(task, completed=ev[6])
                    if ev[3] != "ok":                   # failures stay visible above the bar
                        why = str(ev[5] or "").splitlines()[0][:120] if ev[5] else ""
                        bar.console.print(f"trial {ev[1]} {ev[3]}: {self._short(ev[9], ev[2])} {why}",
                                          markup=False, highlight=False)
                bar.update(task, best=best_s)
                continue
            if ev[0] == "trial":
                _, n, cid, status, value, reason, done, new, el, config = ev
                left = max(0, st.budget - done)
                eta = f" eta {el / new * left:.0f}s" if new and status != "pruned" else ""
                v = f" {value:.4g}" if value is not None else ""
                why = f" ({str(reason).splitlines()[0][:120]})" if reason and status != "ok" else ""
                st.tn._say(f"[{done}/{st.budget}] trial {n} {status}{v} {self._short(config, cid)}{why} | "
                           f"{best_s}{eta}")
            elif ev[0] == "retime":
                n, cid, value = ev[1:4]
                where = "" if len(ev) < 5 else f" on {shape_str(ev[4][0])} {ev[4][1]}"
                st.tn._say(f"retimed trial {n} {cid}{where}: {value if value is None else format(value, '.4g')}")

    def _best_so_far(self):
        try:
            return self.st.study.best_value
        except ValueError:
            return None

    def _short(self, config, cid) -> str:
        """The tunable parameters of a config, for a progress line."""
        if not isinstance(config, dict):
            return cid
        try:
            names = list(self.st.space.tunable())
        except Exception:                               # noqa: BLE001
            names = list(config)
        return " ".join(f"{k}={config[k]}" for k in names if k in config) or cid
