"""What the runnable kernel examples share: `--set KEY=VALUE` config overrides and the choice between
running on a GPU and compiling for sm_90 without one."""
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


def main_for(args, run: Callable[[object], int], describe: Callable[[object], int]) -> int:
    """`run(args)` on a GPU (unless --compile-only), else `describe(args)`: compile for sm_90 and show the
    machine code."""
    try:
        import torch
        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu and not args.compile_only:
        return run(args)
    if not has_gpu:
        print("no GPU: compiling for sm_90 only")
    return describe(args)
