"""SASS post-passes: rewrites of a kernel's machine code after ptxas, for what neither TTGIR nor PTX can say.

`ffma_yield` (`gl.set_ffma_yield()`): in each run of FFMAs after a WGMMA wait (fp8 block scales' promotion of a
k-step's product into the fp32 sum), every second FFMA gets the control code's yield flag and loses its
operand-reuse flags. ptxas issues such a run without a yield, so the warp keeps its scheduler for the whole
promotion while another warpgroup's warps on the same scheduler wait to issue their WGMMA (all four warps of a
warpgroup must reach it); with the yields the scheduler may switch there. DeepSeek's DeepGEMM does the same to its
binaries. A reuse flag caches an operand for the warp's next instruction, which a switch in between would break,
so a yielding instruction and the one before it keep none (the next one reads the register file: a switch is
never between an operand's caching and its use, whichever side of the yielding instruction it falls on). Only
control bits change: the
instructions, their order and their operands do not (`_check_same_program` compares the two disassemblies).

The 128-bit Volta+ encoding, high 64-bit word (what `triton.tools.disasm` decodes): stall 41-44, yield 45 (0 =
yield), write / read barrier 46-48 / 49-51, wait mask 52-57, operand reuse 58-61.

Like the PTX passes (backend/ptx), a pass runs where the kernel's ABI names it (`KernelABI.sass_passes`), and its
source hash is part of the cache key of the kernels it rewrites.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile

from ..abi import KernelABI
from .machine_code import cuobjdump_path
from .ptx.hashing import file_hash

_YIELD = 1 << 45                # set: no yield
_REUSE = 0xF << 58
_CONTROL = _YIELD | _REUSE      # what ffma_yield may change
_MIN_RUN = 8                    # FFMAs in a run worth interleaving (a promotion holds 32 .. 128)
_FUNC = re.compile(r"\s*Function\s*:\s*(\S+)")
_INSTR = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;\s*/\*\s*0x([0-9a-f]{16})\s*\*/")
_HIGH = re.compile(r"\s*/\*\s*0x([0-9a-f]{16})\s*\*/\s*$")


@dataclasses.dataclass
class Instr:
    """One SASS instruction of a function: its byte offset in the function, its text and its two 64-bit words."""

    offset: int
    text: str
    lo: int
    hi: int

    @property
    def opcode(self) -> str:
        words = self.text.split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")
        return op.split(".")[0]

    @property
    def encoding(self) -> bytes:
        return self.lo.to_bytes(8, "little") + self.hi.to_bytes(8, "little")


def disassemble(cubin: bytes, function: str) -> list[Instr]:
    """`function`'s instructions in `cubin`, from the Triton wheel's cuobjdump."""
    fd, path = tempfile.mkstemp(suffix=".cubin")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        text = subprocess.run([cuobjdump_path(), "-sass", path], capture_output=True, text=True, timeout=120,
                              check=True).stdout
    finally:
        os.remove(path)
    out: list[Instr] = []
    current, pending = None, None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            current = m.group(1)
            continue
        if current != function:
            continue
        m = _INSTR.match(line)
        if m:
            pending = (int(m.group(1), 16), m.group(2).strip(), int(m.group(3), 16))
            continue
        m = _HIGH.match(line)
        if m and pending is not None:
            out.append(Instr(pending[0], pending[1], pending[2], int(m.group(1), 16)))
            pending = None
    if not out:
        raise ValueError(f"cuobjdump shows no instructions of {function!r} in the cubin")
    return out


def _code_start(cubin: bytes, instrs: list[Instr]) -> int:
    """Where the function's code starts in the cubin: the one place its first instructions' bytes are found."""
    head = b"".join(i.encoding for i in instrs[:64])
    at = cubin.find(head)
    if at < 0 or cubin.find(head, at + 1) >= 0:
        raise ValueError("the function's code is not found exactly once in the cubin")
    return at


def ffma_runs(instrs: list[Instr]) -> list[list[int]]:
    """Indices of the FFMAs of each run that follows a WGMMA wait (`WARPGROUP.DEPBAR`) up to the next branch,
    WGMMA or wait; other instructions inside a run (a named barrier, an mbarrier arrive) do not end it."""
    runs: list[list[int]] = []
    run: list[int] | None = None
    for k, ins in enumerate(instrs):
        op = ins.opcode
        if op == "WARPGROUP":
            if run is not None and len(run) >= _MIN_RUN:
                runs.append(run)
            run = [] if ins.text.split()[0].startswith("WARPGROUP.DEPBAR") else None
        elif run is not None and op == "FFMA":
            run.append(k)
        elif run is not None and (op in ("BRA", "EXIT", "RET") or op.endswith("GMMA")):
            if len(run) >= _MIN_RUN:
                runs.append(run)
            run = None
    if run is not None and len(run) >= _MIN_RUN:
        runs.append(run)
    return runs


def ffma_yield(cubin: bytes, function: str) -> tuple[bytes, dict]:
    """`cubin` with every second FFMA of each promotion run (`ffma_runs`) yielding and keeping no operand in the
    reuse cache; (the new cubin, what it did)."""
    instrs = disassemble(cubin, function)
    start = _code_start(cubin, instrs)
    out = bytearray(cubin)
    changed = 0
    runs = ffma_runs(instrs)

    def clear(k: int, bits: int) -> None:
        ins = instrs[k]
        at = start + ins.offset
        if bytes(out[at:at + 8]) != ins.encoding[:8]:
            raise ValueError(f"{function}: the bytes at code offset {ins.offset:#x} are not its {ins.text!r}")
        hi = int.from_bytes(out[at + 8:at + 16], "little") & ~bits
        out[at + 8:at + 16] = hi.to_bytes(8, "little")

    for run in runs:
        for k in run[1::2]:
            if not instrs[k].hi & _YIELD:
                continue                            # ptxas made it yield already
            clear(k - 1, _REUSE)
            clear(k, _CONTROL)
            changed += 1
    new = bytes(out)
    if changed:
        _check_same_program(instrs, disassemble(new, function))
    return new, {"runs": len(runs), "ffmas_yielding": changed}


def _check_same_program(before: list[Instr], after: list[Instr]) -> None:
    """The rewritten function is the same program: the same instructions and operands at the same offsets (the
    text without its `.reuse` marks), the words equal outside the yield and reuse bits."""
    if len(before) != len(after):
        raise ValueError(f"the rewrite changed the instruction count ({len(before)} -> {len(after)})")
    for b, a in zip(before, after):
        same_text = b.text.replace(".reuse", "") == a.text.replace(".reuse", "")
        if b.offset != a.offset or b.lo != a.lo or (b.hi ^ a.hi) & ~_CONTROL or not same_text:
            raise ValueError(f"the rewrite changed the instruction at {b.offset:#x}: {b.text!r} -> {a.text!r}")


# pass name (the kernel attribute and `gl.set_<name>`) -> the rewrite of one function's cubin
OPT_IN = {"ffma_yield": ffma_yield}


def requested(abi: KernelABI | None) -> list[str]:
    """The SASS passes this kernel's binary goes through, in order."""
    if abi is None:
        return []
    unknown = [n for n in abi.sass_passes if n not in OPT_IN]
    if unknown:
        raise ValueError(f"kernel {abi.name} asks for unknown SASS passes {unknown}; known: {sorted(OPT_IN)}")
    return [n for n in OPT_IN if n in abi.sass_passes]


def key_parts(abi: KernelABI | None) -> tuple:
    """What of the passes a kernel's binary depends on: this module's source, where any runs."""
    names = requested(abi)
    return (("sass_passes", [names, file_hash(__file__)]),) if names else ()


def stage_hook(names: list[str], stats: dict):
    """A Triton stages hook that runs the kernel's cubin through the passes `names`, their stats into `stats`."""
    def hook(backend, stages, options, language, capability):
        make_cubin = stages["cubin"]

        def cubin_stage(src, metadata):
            cubin = make_cubin(src, metadata)
            for name in names:
                cubin, st = OPT_IN[name](cubin, metadata["name"])
                stats[name] = st
            return cubin

        stages["cubin"] = cubin_stage

    return hook
