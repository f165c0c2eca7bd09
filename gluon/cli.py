"""The `gluon` command (also `python -m gluon`).

    gluon info                      versions, targets, the GPU present
    gluon compile FILE.py:KERNEL    trace + compile one kernel, print its IR / TTGIR / PTX / SASS / resources
    gluon selftest                  compile the built-in kernels for every target and check their machine code
    gluon check SPEC                validate a spec, prune and compile a sample of its configs (--all: all; no GPU)
    gluon tune SPEC                 search, verify, time and record (a dry run without a GPU)
    gluon results [NAME]            the best results per (spec, arch, shape, dtype)
    gluon report [NAME]             plots and report.md: best so far, ratio per shape, importance, bottleneck
    gluon build --best              best config per bucket -> binaries + manifest for gluon.load

Exit codes: 0 success, 1 a check failed, 2 bad usage or input (a message names what and where).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
from typing import Any

from .version import __version__
from .arch import ALL_ARCHS, arch_by_name, current_arch
from .ir import GluonError
from .types import DType, TensorRef


def _info(args) -> int:
    import triton
    gpu = None
    try:
        a = current_arch()
        if a is not None:
            import torch
            gpu = {"name": torch.cuda.get_device_name(), "arch": a.name}
    except Exception as e:  # a broken driver should not hide the rest
        gpu = {"error": str(e)}
    info = {"gluon": __version__, "triton": triton.__version__, "python": sys.version.split()[0],
            "targets": [{"arch": a.name, "target": a.target_string, "warp_size": a.warp_size} for a in ALL_ARCHS],
            "gpu": gpu, "cache_dir": str(_cache_root())}
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        print(f"gluon {info['gluon']}  triton {info['triton']}  python {info['python']}")
        print("targets: " + ", ".join(f"{t['arch']} ({t['target']})" for t in info["targets"]))
        print(f"gpu: {gpu or 'none'}")
        print(f"cache: {info['cache_dir']}")
    return 0


def _cache_root():
    from .cache import KernelCache
    return KernelCache().root


_ARG_RE = re.compile(r"^(?P<dtype>\w+)(\[(?P<shape>[^\]]*)\])?$")


def parse_arg(name: str, spec: str):
    """`f16[M,K]` -> TensorRef, `ptr:f32` -> PointerArg, `i32` -> scalar (any value), `i32=4096` -> the scalar
    as a launch with that value specializes it (divisible by 16 or not; i64 past i32), `desc:f16[128,64]` ->
    DescArg."""
    from .language.kernel import DescArg, PointerArg, ScalarArg
    try:
        if "=" in spec and not spec.startswith(("ptr:", "desc:")):
            kind, _, value = spec.partition("=")
            v = int(value)
            dt = DType.from_name(kind)
            if not dt.is_int:
                raise ValueError(f"a value specializes integer scalars only, not {kind}")
            if not -2**31 <= v < 2**31:
                dt = DType.i64
            return ScalarArg(dt, 16 if v % 16 == 0 else 1)
        if spec.startswith("ptr:"):
            return PointerArg(DType.from_name(spec[4:]))
        if spec.startswith("desc:"):
            m = _ARG_RE.match(spec[5:])
            shape = tuple(int(x) for x in m.group("shape").split(","))
            return DescArg(DType.from_name(m.group("dtype")), shape)
        m = _ARG_RE.match(spec)
        if m is None:
            raise ValueError(spec)
        dt = DType.from_name(m.group("dtype"))
        if m.group("shape") is None:
            return ScalarArg(dt)
        dims = tuple(int(d) if d.strip().isdigit() else d.strip() for d in m.group("shape").split(","))
        return TensorRef(name, dt, shape=dims)
    except (ValueError, AttributeError, TypeError) as e:
        raise SystemExit(_usage(f"--arg {name}={spec}: {e}; write a tensor as f16[M,K], a pointer as ptr:f32, "
                                "a scalar as i32 (or i32=VALUE, specialized as a launch with VALUE), a TMA "
                                "descriptor as desc:f16[128,64]"))


def _usage(msg: str) -> str:
    print(f"gluon: error: {msg}", file=sys.stderr)
    return 2  # type: ignore[return-value]


def _load_kernel(ref: str):
    path, _, name = ref.rpartition(":")
    if not path or not name:
        raise SystemExit(_usage(f"{ref!r}: name the kernel as FILE.py:KERNEL or package.module:KERNEL"))
    if path.endswith(".py"):
        if not os.path.exists(path):
            raise SystemExit(_usage(f"{path}: no such file"))
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
        mod = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        spec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(path)
    k = getattr(mod, name, None)
    if k is None or not hasattr(k, "trace"):
        raise SystemExit(_usage(f"{path} has no gluon kernel named {name!r}"))
    return k


def _literal(v: str) -> Any:
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(v, v)


def _arch_name(value: str) -> str:
    """--arch: any name `arch_by_name` knows (sm90, sm_90, 90, hopper, gfx942, ...) as the canonical one."""
    try:
        return arch_by_name(value).name
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_seconds(value: str) -> float:
    """--time-limit: a number of seconds above zero."""
    try:
        v = float(value)
    except ValueError:
        v = float("nan")
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds above zero (e.g. 600)")
    return v


# what each backend's compile produces, for --emit
_EMITS = {"cuda": ("ptx", "sass"), "hip": ("amdgcn",)}


def _compile(args) -> int:
    from .jit import compile_module, run_passes
    from .language.kernel import ScalarArg
    backend = arch_by_name(args.arch).backend
    machine = [e for emits in _EMITS.values() for e in emits]
    if args.emit in machine and args.emit not in _EMITS.get(backend, ()):
        return _usage(f"--emit {args.emit}: a {args.arch} ({backend}) compile produces "
                      f"{' and '.join(_EMITS.get(backend, ()))}, not {args.emit}")
    k = _load_kernel(args.kernel)
    kw: dict[str, Any] = {}
    any_value = []                      # integer scalars given as a type only: compiled for any value
    for item in args.arg or []:
        name, _, spec = item.partition("=")
        kw[name] = parse_arg(name, spec)
        if type(kw[name]) is ScalarArg and kw[name].dtype.is_int and "=" not in spec:
            any_value.append(name)
    for item in args.const or []:
        name, _, v = item.partition("=")
        kw[name] = _literal(v)
    block = tuple(int(x) for x in args.block.split(",")) if args.block else None
    try:
        module = k.trace(arch=args.arch, num_warps=args.num_warps, block=block, **kw)
        if args.emit == "ir":
            print(module.pretty())
            return 0
        if args.emit == "ir-passes":
            print(run_passes(module).pretty())
            return 0
        ck = compile_module(module)
    except GluonError as e:
        print(f"gluon: error: {e}", file=sys.stderr)
        return 2
    out = {"ttgir": lambda: ck.ttgir, "llir": lambda: ck.asm["llir"], "ptx": lambda: ck.asm.get("ptx", ""),
           "amdgcn": lambda: ck.asm.get("amdgcn", ""), "sass": ck.sass}
    if args.emit in out:
        print(out[args.emit]())
    else:
        res = {"kernel": ck.kernel.name, "target": ck.kernel.arch.target_string, "registers": ck.registers,
               "spills": ck.spills, "shared_bytes": ck.shared_bytes, "num_warps": ck.binary.num_warps,
               "cache": str(ck.binary.path)}
        print(json.dumps(res, indent=1) if args.json else "  ".join(f"{k}={v}" for k, v in res.items()))
    if any_value:
        print(f"note: {', '.join(any_value)} compiled for any value; a launch specializes integers on divisibility "
              f"by 16, so pass the value (--arg {any_value[0]}=i32=VALUE) to see what runs", file=sys.stderr)
    return 0


SELFTEST = [
    # (kernel module:function, args builder, arch, instructions that must be in the machine code)
    ("gluon.kernels.gemm_tile_sm90:gemm_tile_sm90", "sm90", ("HGMMA", "UTMALDG", "UTMASTG")),
    ("gluon.kernels.tile_dots:mma_tile_sm80", "sm80", ("HMMA", "LDGSTS", "LDSM")),
    ("gluon.kernels.tile_dots:mfma_tile_cdna3", "cdna3", ("v_mfma",)),
]


def _selftest(args) -> int:
    from .backend.machine_code import sass_instructions
    from .jit import compile_module
    rows, ok = [], True
    for ref, arch, must in SELFTEST:
        k = _load_kernel(ref)
        if arch == "sm90":
            refs = (TensorRef("A", DType.f16, shape=("M", "K")), TensorRef("B", DType.f16, shape=("K", "N")),
                    TensorRef("C", DType.f16, shape=("M", "N")), DType.i32)
        else:
            refs = (TensorRef("A", DType.f16, shape=(64, 32)), TensorRef("B", DType.f16, shape=(32, 64)),
                    TensorRef("C", DType.f32, shape=(64, 64)))
        row = {"kernel": ref.split(":")[1], "arch": arch}
        try:
            ck = compile_module(k.trace(*refs))
            if ck.binary.target[0] == "cuda":
                found = sass_instructions(ck.sass())
                missing = [m for m in must if not found[m]]
            else:
                missing = [m for m in must if m not in ck.asm["amdgcn"]]
            row.update(registers=ck.registers, spills=ck.spills, missing=missing, ok=not missing and not ck.spills)
        except Exception as e:  # report every kernel, then fail
            row.update(ok=False, error=f"{type(e).__name__}: {e}")
        ok &= row["ok"]
        rows.append(row)
        if not args.json:
            status = "ok" if row["ok"] else "FAIL"
            detail = row.get("error") or f"registers={row['registers']} spills={row['spills']}" + (
                f" missing={row['missing']}" if row["missing"] else f" has {', '.join(must)}")
            print(f"{status:4} {row['kernel']:<18} {arch:<6} {detail}")
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0 if ok else 1


def _spec_or_exit(path: str):
    from .tuning.spec import SpecError, load_spec
    try:
        return load_spec(path)
    except SpecError as e:
        raise SystemExit(_usage(str(e)))


def _check(args) -> int:
    from .tuning.check import check_spec, summary_lines
    from .tuning.settings import check_against_template
    from .tuning.spec import SpecError, template_of
    spec = _spec_or_exit(args.spec)
    try:
        template = template_of(spec)
    except Exception as e:  # an import error in the user's template: name it, no traceback
        return _usage(str(e))
    try:
        check_against_template(spec, template)
    except SpecError as e:
        return _usage(str(e))
    # rows as they finish: on stdout, or with --json (which prints the rows at the end) on stderr
    out = sys.stderr if args.json else sys.stdout
    report = check_spec(spec, template, all_configs=args.all, compile=args.compile, workers=args.workers,
                        progress=lambda line: print(line, file=out, flush=True))
    if args.json:
        print(json.dumps([r.as_dict() for r in report.rows], indent=1, default=str))
    else:
        print("\n".join(summary_lines(spec.name, report, args.compile)))
    return 0 if report.legal and not report.failed else 1


def _tune(args) -> int:
    from .tuning.spec import SpecError
    from .tuning.tuner import TuneError, tune
    spec = _spec_or_exit(args.spec)
    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else None
    try:
        summary = tune(spec, gpus=gpus, dry_run=True if args.dry_run else None, trials=args.trials,
                       results_root=args.results, tuning_root=args.tuning, storage=args.storage,
                       progress=not args.json, time_limit_s=args.time_limit)
    except (TuneError, SpecError) as e:     # a storage that cannot be opened, a spec the template refuses
        return _usage(str(e))
    except KeyboardInterrupt:
        print("interrupted: the study is saved; run the same command again to resume", file=sys.stderr)
        return 130
    if args.json:
        import dataclasses
        print(json.dumps(dataclasses.asdict(summary), indent=1, default=str))
    # (without --json the tuner has printed its summary, once)
    return 0 if summary.best_config is not None else 1


def _results(args) -> int:
    from .tuning.results import ResultsStore, summary
    df = ResultsStore(args.results).read()
    if args.name:
        df = df[df["spec_name"] == args.name]
    if df is None or df.empty:
        print(f"no results under {args.results}/" + (f" for {args.name}" if args.name else ""), file=sys.stderr)
        return 1
    best = df if args.all else summary(df)
    cols = [c for c in ("spec_name", "arch", "shape", "dtype", "config_id", "status", "median_ms", "baseline_ms",
                        "ratio", "tflops", "gbps", "max_err", "registers", "dry_run") if c in best]
    if args.json:
        print(best[cols + ["config_json"]].to_json(orient="records", indent=1))
    else:
        print(best[cols].to_string(index=False))
    return 0


def _report(args) -> int:
    from .tuning.report import ReportError, write_report
    try:
        rep = write_report(args.results, args.out, args.name, specs_dir=args.specs, tuning_root=args.tuning,
                           storage=args.storage)
    except ReportError as e:
        print(f"gluon: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"out": rep.out, "markdown": rep.markdown, "files": rep.files, "best": rep.best,
                          "importance": rep.importance}, indent=1, default=str))
    else:
        for f in rep.files:
            print(f"wrote {f}")
    return 0


def _build(args) -> int:
    from .tuning.build import BuildError, build_best
    if not args.best:
        return _usage("gluon build needs --best (the only build mode: the best measured config per bucket)")
    try:
        paths = build_best(args.results, args.specs, args.out, args.names or None, args.allow_dry_run,
                           log=(lambda m: None) if args.json else print)
    except BuildError as e:
        return _usage(str(e))
    if args.json:
        print(json.dumps([str(p) for p in paths]))
    else:
        for p in paths:
            print(f"wrote {p}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gluon", description="GPU kernels with explicit layouts, compiled through Triton 3.6.")
    p.add_argument("--version", action="version", version=f"gluon {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("info", help="versions, targets and the GPU present")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_info)
    s = sub.add_parser("compile", help="trace and compile one kernel; print what it became",
                       description="Example: gluon compile examples/copy_kernel.py:copy_kernel --arch sm90 "
                                   "--block 2048 --arg dst_ptr=ptr:f32 --arg src_ptr=ptr:f32 --arg n_elements=i32 "
                                   "--const XBLOCK=2048 --emit sass")
    s.add_argument("kernel", help="FILE.py:KERNEL or package.module:KERNEL")
    s.add_argument("--arch", default="sm90", type=_arch_name,
                   help="sm80 | sm90 | sm100 | cdna3 (default sm90)")
    s.add_argument("--num-warps", type=int, default=None)
    s.add_argument("--block", help="launch block for SIMT kernels, e.g. 2048")
    s.add_argument("--arg", action="append", metavar="NAME=TYPE",
                   help="a parameter: f16[M,K] (tensor), ptr:f32, i32, desc:f16[128,64]")
    s.add_argument("--const", action="append", metavar="NAME=VALUE", help="a constexpr parameter")
    s.add_argument("--emit", default="summary", choices=["ir", "ir-passes", "ttgir", "llir", "ptx", "amdgcn", "sass",
                                                         "summary"])
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_compile)
    s = sub.add_parser("selftest", help="compile the built-in kernels for each target and check their machine code")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_selftest)
    s = sub.add_parser("check", help="validate a spec and prune/compile its configs (no GPU needed)")
    s.add_argument("spec")
    s.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                   help="compile the legal configs checked (default) or only run the checks (--no-compile)")
    s.add_argument("--all", action="store_true",
                   help="check every config of the space (default: a sample holding every value of every parameter)")
    s.add_argument("--workers", type=int, default=None, help="compile processes (default: one per core, at most 8)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_check)
    s = sub.add_parser("tune", help="search the spec's space on the GPU: verify, time, record (dry run without one)")
    s.add_argument("spec")
    s.add_argument("--trials", type=int, default=None, help="override the spec's tuning.trials")
    s.add_argument("--time-limit", type=_positive_seconds, default=None, metavar="SECONDS",
                   help="override the spec's tuning.time_limit_s: the search and the re-timing of the best "
                        "end within it")
    s.add_argument("--gpus", help="comma list of GPU indices, one worker each (default: all visible)")
    s.add_argument("--dry-run", action="store_true", help="validate, prune, compile a sample, rank by a model")
    s.add_argument("--results", default="results", help="results folder (parquet rows)")
    s.add_argument("--tuning", default="tuning", help="study storage folder")
    s.add_argument("--storage", default=None, metavar="URL_OR_PATH",
                   help="the study's storage instead of TUNING/<study>.log: a journal file path, sqlite:///path.db, "
                        "or postgresql://user@host/db shared by several machines (default: the spec's "
                        "tuning.storage)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_tune)
    s = sub.add_parser("results", help="print the best result per (spec, arch, shape, dtype)")
    s.add_argument("name", nargs="?", help="a spec name (default: all)")
    s.add_argument("--results", default="results")
    s.add_argument("--all", action="store_true", help="every row, not only the best")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_results)
    s = sub.add_parser("report", help="plots and a markdown summary of the results (best so far, ratio, importance)")
    s.add_argument("name", nargs="?", help="a spec name (default: all)")
    s.add_argument("--results", default="results")
    s.add_argument("--out", default=None, help="output folder (default: RESULTS/report)")
    s.add_argument("--specs", default="specs", help="where the spec files are (their templates count flops/bytes)")
    s.add_argument("--tuning", default="tuning", help="study storage folder (for parameter importance)")
    s.add_argument("--storage", default=None, metavar="URL_OR_PATH", help="the studies' storage, if not TUNING/")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_report)
    s = sub.add_parser("build", help="compile the best config per bucket into binaries + manifest")
    s.add_argument("names", nargs="*", help="spec names (default: all with results)")
    s.add_argument("--best", action="store_true", help="build the best measured config of each bucket")
    s.add_argument("--results", default="results")
    s.add_argument("--specs", default="specs", help="where the spec files are")
    s.add_argument("--out", default=None, help="output folder (default: RESULTS/build)")
    s.add_argument("--allow-dry-run", action="store_true", help="accept configs only ranked by the dry-run model")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_build)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:             # `gluon results ... | head`: the reader has what it wanted; say nothing
        _quiet_stdout()
        return 0


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush does not raise on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):      # (a stand-in stdout has no file descriptor)
        pass


if __name__ == "__main__":
    sys.exit(main())
