"""Ctrl-C during a tuning run is noted as a flag and raised where the run handles it (gluon/tuning/interrupt.py),
never lost in a finalizer. Each case runs in its own interpreter: the SIGINTs go to that process, not pytest's."""
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PRELUDE = f"""
import os, signal, sys, threading, time
sys.path.insert(0, {REPO!r})
from gluon.tuning.interrupt import CtrlC, noted
signal.signal(signal.SIGINT, signal.default_int_handler)    # as from a terminal (pytest may run with it ignored)

def press():
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)            # the handler runs here, before sleep returns

class Finalized:
    def __del__(self):
        press()

def raised(fn):
    try:
        fn()
        return False
    except KeyboardInterrupt:
        return True
"""


def _run(body: str) -> list[str]:
    code = _PRELUDE + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_python_loses_a_ctrl_c_that_lands_in_a_finalizer():
    """Why the flag: without it, SIGINT inside a `__del__` is printed as "Exception ignored" and lost."""
    assert _run("""
        def body():
            x = Finalized()
            del x
        print(raised(body))
    """) == ["False"]


def test_a_ctrl_c_in_a_finalizer_is_noted_and_raised_by_check():
    out = _run("""
        c = CtrlC()
        with noted(c):
            x = Finalized()
            del x                       # the handler only notes it: nothing raised in the finalizer
            print(c.pressed.is_set(), raised(c.check))
    """)
    assert out == ["True", "True"]


def test_a_second_ctrl_c_raises_at_once_and_the_handler_is_restored():
    out = _run("""
        c = CtrlC()
        with noted(c):
            print(raised(press), raised(press))
        print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, raised(press))
    """)
    assert out == ["False", "True", "True", "True"]


def test_a_handler_the_caller_installed_and_other_threads_are_left_alone():
    out = _run("""
        seen = []
        signal.signal(signal.SIGINT, lambda s, f: seen.append(s))
        c = CtrlC()
        with noted(c):
            press()
            print(len(seen), c.pressed.is_set(), raised(c.check))
        signal.signal(signal.SIGINT, signal.default_int_handler)

        def in_a_thread():
            with noted(c):
                print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        t = threading.Thread(target=in_a_thread)
        t.start()
        t.join()
    """)
    assert out == ["1", "False", "False", "True"]
