"""What the runnable kernel examples share: `--set KEY=VALUE` config overrides and the choice between
running on a GPU, compiling for sm_90 without one (and checking a small case in the CPU interpreter), and
`--interpret` (the check at the given shape in the interpreter)."""
from __future__ import annotations

import argparse
import difflib
from typing import Callable, Iterable


def parse_sets(p: argparse.ArgumentParser, sets: Iterable[str]) -> dict:
    """The `--set KEY=VALUE` flags as a dict; true/false and integers typed, the rest strings."""
    overrides = {}
    for kv in sets:
        key, sep, val = kv.partition("=")
        if not sep or not key.strip():
            p.error(f"--set {kv!r}: expected KEY=VALUE")
        val = val.strip()
        if val.lower() in ("true", "false"):
            overrides[key.strip()] = val.lower() == "true"
        else:
            try:
                overrides[key.strip()] = int(val)
            except ValueError:
                overrides[key.strip()] = val
    return overrides


def check_keys(p: argparse.ArgumentParser, overrides: dict, keys: Iterable[str]) -> None:
    """A usage error (exit code 2) for the first override that is not a config key, with the nearest one."""
    keys = list(keys)
    for key in sorted(set(overrides) - set(keys)):
        near = difflib.get_close_matches(key, keys, n=1)
        p.error(f"--set {key}: not a config key" + (f" (did you mean {near[0]}?)" if near else "")
                + f"; the keys are {', '.join(keys)}")


def add_interpret_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interpret", action="store_true", help="check this shape on the CPU in the IR interpreter "
                   "(gluon/interpret, GLUON_INTERPRET=1), no GPU needed; without a GPU a small case is checked so "
                   "anyway (unless --compile-only)")


def interpreted(check: Callable[[], int]) -> int:
    """`check()` with ordinary launches running in the CPU interpreter; a kernel the interpreter cannot run
    (a cluster, inline assembly) is reported and skipped (exit code 0), not failed; a config the kernel
    rejects is reported as the GPU run reports it (exit code 2)."""
    import sys

    from gluon import GluonError
    from gluon.interpret import set_enabled
    was = set_enabled(True)
    try:
        return check()
    except GluonError as e:
        if "interpreter" not in str(e):             # the config's own error, as a GPU run reports it
            print(f"rejected before compilation: {e}", file=sys.stderr)
            return 2
        print(f"not checked in the interpreter: {str(e).splitlines()[0]}")
        return 0
    finally:
        set_enabled(was)


def gpu_present() -> bool:
    """Whether torch is installed and sees a CUDA device: an example's choice between its GPU run and its
    compile-and-interpret fallback."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def main_for(args, run: Callable[[object], int], describe: Callable[[object], int],
             interpret: Callable[[object, bool], int] | None = None) -> int:
    """`run(args)` on a GPU (unless --compile-only); `interpret(args, True)` with --interpret; else
    `describe(args)`: compile for sm_90 and show the machine code, then, without a GPU,
    `interpret(args, False)`: a small case checked in the CPU interpreter."""
    if interpret is not None and getattr(args, "interpret", False):
        return interpret(args, True)
    has_gpu = gpu_present()
    if has_gpu and not args.compile_only:
        return run(args)
    check_too = not has_gpu and not args.compile_only and interpret is not None
    if not has_gpu:
        print("no GPU: compiling for sm_90" + (", then checking a small case in the CPU interpreter" if check_too
                                                else " only"))
    rc = describe(args)
    return interpret(args, False) if rc == 0 and check_too else rc


def interpreted_cases(check: Callable, cases: Iterable) -> int:
    """The no-GPU fallback of a gallery example: `check(*shape, dtype, device="cpu")` -> (ok, err, ...) for
    each (shape, dtype name) of `cases` ("float16", ...: the torch dtype of that name), run in the CPU
    interpreter, one line each; exit code 1 if any is wrong, 0 without torch (no tensors to interpret on)."""
    try:
        import torch
    except ImportError:
        return 0
    wrong = 0

    def run() -> int:
        nonlocal wrong
        for shape, name in cases:
            dtype = getattr(torch, name)
            ok, err = check(*shape, dtype, device="cpu")[:2]
            wrong += not ok
            print(f"interpreted on the CPU: {'x'.join(map(str, shape))} {str(dtype).removeprefix('torch.')}: "
                  f"{'ok' if ok else 'WRONG'} (err {err:.1e})")
        return 1 if wrong else 0
    return interpreted(run)
