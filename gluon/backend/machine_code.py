"""What a compiled binary says about itself, read without a GPU: registers, spills, stack and shared
memory (cuobjdump and ptxas' log for CUDA, the amdgcn text for HIP), and the opcodes of its SASS."""
from __future__ import annotations

import collections
import pathlib
import re
import subprocess
from typing import Any


def cuobjdump_path() -> str:
    from triton import knobs

    return knobs.nvidia.cuobjdump.path


def cuda_resources(cubin_file: pathlib.Path, ptxas_log: str, name: str) -> dict:
    """Registers etc. from ``cuobjdump --dump-resource-usage``; spills from ptxas -v.

    cuobjdump reads the cubin (authoritative: REG, STACK, LOCAL, SHARED (static,
    e.g. the 1 KiB SM90+ reserve; Triton's dynamic shared memory is
    ``metadata["shared"]``), CONSTANT[0]).  Spill stores/loads are only reported
    by ``ptxas -v``, whose log Triton prints when ``dump_ptxas_log`` is set.
    """
    res: dict[str, Any] = {"source": []}
    try:
        out = subprocess.run([cuobjdump_path(), "--dump-resource-usage", str(cubin_file)], capture_output=True,
                             text=True, timeout=60, check=True).stdout
        res.update(_parse_cuobjdump_resources(out, name))
        res["source"].append("cuobjdump")
    except Exception as e:  # noqa: BLE001 - a missing tool must not fail the compile
        res["cuobjdump_error"] = f"{type(e).__name__}: {e}"
    p = _parse_ptxas_log(ptxas_log)
    if p:
        res["source"].append("ptxas")
        res.update(p)
    return res


def _parse_cuobjdump_resources(text: str, name: str | None = None) -> dict:
    """Parse ``cuobjdump --dump-resource-usage`` for one function (``name``, or the first)."""
    fields: dict[str, int] | None = None
    cur = None
    for ln in text.splitlines():
        m = re.match(r"\s*Function\s+([^\s:]+)\s*:", ln)
        if m:
            cur = m.group(1)
            continue
        if cur is not None and "REG:" in ln and (name is None or cur == name or fields is None):
            fields = {k: int(v) for k, v in re.findall(r"([A-Z_]+(?:\[\d+\])?):(\d+)", ln)}
            if name is None or cur == name:
                break
    if not fields:
        return {}
    return {
        "registers": fields.get("REG", 0),
        "stack_bytes": fields.get("STACK", 0),
        "local_bytes": fields.get("LOCAL", 0),
        "static_shared_bytes": fields.get("SHARED", 0),
        "constant0_bytes": fields.get("CONSTANT[0]", 0),
    }


def _parse_ptxas_log(text: str) -> dict:
    out: dict[str, Any] = {}
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", text)
    if m:
        out["stack_frame_bytes"], out["spill_store_bytes"], out["spill_load_bytes"] = map(int, m.groups())
    m = re.search(r"Used (\d+) registers", text)
    if m:
        out["ptxas_registers"] = int(m.group(1))
    m = re.search(r"used (\d+) barriers", text)
    if m:
        out["barriers"] = int(m.group(1))
    warnings = [ln.strip() for ln in text.splitlines() if "warning" in ln.lower()]
    if warnings:
        out["ptxas_warnings"] = warnings
    return out


def hip_resources(amdgcn: str) -> dict:
    """Registers/spills from the amdgcn text: the kernel descriptor metadata
    (``.vgpr_count``, ``.vgpr_spill_count``, ...) and the ``; NumVgprs:`` comments."""

    def num(pattern):
        m = re.search(pattern, amdgcn, re.MULTILINE)
        return int(m.group(1)) if m else None

    res = {
        "vgpr_count": num(r"^\s*-?\s*\.vgpr_count:\s*(\d+)"),
        "agpr_count": num(r"^\s*-?\s*\.agpr_count:\s*(\d+)"),
        "sgpr_count": num(r"^\s*-?\s*\.sgpr_count:\s*(\d+)"),
        "vgpr_spill_count": num(r"^\s*-?\s*\.vgpr_spill_count:\s*(\d+)"),
        "sgpr_spill_count": num(r"^\s*-?\s*\.sgpr_spill_count:\s*(\d+)"),
        "scratch_bytes": num(r"^\s*-?\s*\.private_segment_fixed_size:\s*(\d+)"),
        "lds_bytes": num(r"^\s*-?\s*\.group_segment_fixed_size:\s*(\d+)"),
        "num_vgprs": num(r"^; NumVgprs:\s*(\d+)"),
        "total_num_vgprs": num(r"^; TotalNumVgprs:\s*(\d+)"),
        "num_sgprs": num(r"^; NumSgprs:\s*(\d+)"),
        "scratch_size": num(r"^; ScratchSize:\s*(\d+)"),
        "occupancy": num(r"^; Occupancy:\s*(\d+)"),
        "source": ["amdgcn"],
    }
    regs = next((v for v in (res["vgpr_count"], res["total_num_vgprs"], res["num_vgprs"]) if v is not None), None)
    res["registers"] = regs
    if res["scratch_bytes"] is None:
        res["scratch_bytes"] = res["scratch_size"]
    return res


_OPCODE_RE = re.compile(r"^[A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*$")
_CTRL_RE = re.compile(r"^[-\w]{2}:[-\w]:[-\w]:[-\w]:[0-9a-f]$")     # Triton's control prefix: "--:-:0:-:1"


def sass_line(raw: str) -> str:
    """One line of SASS without raw cuobjdump's `/*offset*/` and encoding comments and Triton's control prefix:
    `@P0 BRA LBB1;`, a label `LBB1:`, a header, or ''."""
    ln = re.sub(r"/\*.*?\*/", " ", raw).strip()
    if "\t" in ln:
        head, _, rest = ln.partition("\t")
        if _CTRL_RE.match(head.strip()):
            ln = rest.strip()
    return ln


def sass_instructions(sass: str) -> collections.Counter:
    """Count SASS opcodes, keyed by every dotted prefix of each opcode.

    ``HGMMA.64x128x16.F32 ...`` counts once under ``HGMMA``, ``HGMMA.64x128x16``
    and ``HGMMA.64x128x16.F32``, so ``c["HGMMA"]`` is the number of HGMMA
    instructions of any shape and ``c["LDG.E.128"]`` the number of 128-bit global
    loads (whatever modifiers follow).  Predicates (``@P0``, ``@!PT``) are
    ignored.  Because of the prefixes, ``sum(c.values())`` is *not* the
    instruction count; use ``c["<opcode>"]`` lookups.  Accepts Triton's formatted
    SASS (``ctrl\\tOPCODE ...;``, what :meth:`Binary.sass` returns) and raw
    ``cuobjdump -sass`` output.
    """
    counts: collections.Counter = collections.Counter()
    for raw in sass.splitlines():
        ln = sass_line(raw)
        if not ln or ln.endswith(":") or ln.startswith(("Function", ".", "//", "code for", "Fatbin")):
            continue
        toks = ln.replace(";", " ").split()
        while toks and toks[0].startswith("@"):
            toks = toks[1:]
        if not toks or not _OPCODE_RE.match(toks[0]):
            continue
        parts = toks[0].split(".")
        for i in range(1, len(parts) + 1):
            counts[".".join(parts[:i])] += 1
    return counts
