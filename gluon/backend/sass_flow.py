"""Uniform registers that a WGMMA reads before they are written on some path, found in the SASS.

ptxas 12.8 (Triton 3.6's) can compute a WGMMA's shared-memory descriptors in one loop's preheader and read
them in a sibling loop whose preheader it does not pass through: the attention kernel with two Q buffers read
the Q tile's k-step descriptors stale in its masked loop when the unmasked loop ran no step (a wrong Q, at
times an illegal address: docs/ATTENTION.md, PREFETCH_Q). The PTX is right; only the SASS shows it, and
without a GPU: a forward "written on every path" analysis over the SASS's basic blocks, from the kernel's
entry, of the uniform registers (URn) each HGMMA takes its descriptors from (`gdesc[URn]`: URn..URn+3 with
both operands in shared memory, URn+2..URn+3, B's, with A in registers).

Writes are read off the first operand (a URn destination; `.64` and `.WIDE` forms write a pair); a
predicated write counts as none (it may not happen). That over-counts writes only where an instruction
names a uniform register first without writing it, which the SM90 SASS of these kernels does not do. The
warp-specialized dispatch's indirect branch (`BRX`) is taken to reach the blocks nothing else reaches (the
partitions' entries). What it cannot see: a register written on every path, but on one of them for another
purpose (a loop's later iterations reading the previous iteration's value): it finds the first iteration's
path, where nothing wrote it yet.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .machine_code import sass_line

_LABEL = re.compile(r"^([A-Za-z_.$][\w.$]*):$")
_UR = re.compile(r"^UR(\d+)$")
_GDESC = re.compile(r"gdesc\[UR(\d+)\]")


@dataclass(frozen=True)
class Instr:
    """One SASS instruction: its line in the text, predicate (or ''), opcode and operands."""

    line: int
    pred: str
    opcode: str
    operands: tuple[str, ...]
    text: str


@dataclass
class Block:
    label: str | None
    instrs: list[Instr] = field(default_factory=list)
    succs: list[int] = field(default_factory=list)


def parse(sass: str) -> list[Block]:
    """The SASS text (Triton's formatted form, `ctrl<TAB>OPCODE ops;`, or raw cuobjdump) as basic blocks."""
    blocks: list[Block] = [Block(None)]
    for n, raw in enumerate(sass.splitlines(), 1):
        ln = sass_line(raw)
        if not ln:
            continue
        m = _LABEL.match(ln)
        if m:
            if blocks[-1].instrs or blocks[-1].label is not None:
                blocks.append(Block(m.group(1)))
            else:
                blocks[-1].label = m.group(1)
            continue
        ln = ln.rstrip(";").strip()
        toks = ln.split(None, 1)
        if not toks or not re.match(r"^[A-Z][A-Z0-9_]*", toks[0].lstrip("@!")):
            continue
        pred = ""
        if toks[0].startswith("@"):
            pred = toks[0]
            toks = toks[1].split(None, 1) if len(toks) > 1 else []
            if not toks:
                continue
        opcode = toks[0]
        operands = tuple(o.strip() for o in toks[1].split(",")) if len(toks) > 1 else ()
        blocks[-1].instrs.append(Instr(n, pred, opcode, operands, ln))
        if opcode.split(".")[0] in ("BRA", "EXIT", "RET", "BRX", "JMX", "JMP"):
            blocks.append(Block(None))
    blocks = [b for b in blocks if b.instrs or b.label is not None]
    index = {b.label: i for i, b in enumerate(blocks) if b.label is not None}
    indirect = []
    for i, b in enumerate(blocks):
        last = b.instrs[-1] if b.instrs else None
        always = last is not None and last.pred in ("", "@PT", "@UPT")
        op = last.opcode.split(".")[0] if last is not None else ""
        if op in ("BRA", "JMP") and last.operands and last.operands[-1] in index:
            b.succs.append(index[last.operands[-1]])
        elif op in ("BRA", "BRX", "JMP", "JMX"):
            indirect.append(i)
        if (op not in ("BRA", "BRX", "JMP", "JMX", "EXIT", "RET") or not always) and i + 1 < len(blocks):
            b.succs.append(i + 1)
    # an indirect branch (the warp-specialized dispatch's `BRX` through a jump table) goes to the blocks no other
    # block branches or falls through to: the partitions' entries
    reached = {s for j, b in enumerate(blocks) for s in b.succs if s != j}
    entries = [i for i in range(1, len(blocks)) if i not in reached]
    for i in indirect:
        blocks[i].succs.extend(entries)
    return blocks


def _writes(ins: Instr) -> set[int]:
    """Uniform registers `ins` surely writes."""
    if ins.pred not in ("", "@PT", "@UPT") or not ins.operands:
        return set()
    m = _UR.match(ins.operands[0])
    if not m:
        return set()
    r = int(m.group(1))
    wide = any(p in ("64", "WIDE") for p in ins.opcode.split(".")[1:])
    return {r, r + 1} if wide else {r}


def _reads(ins: Instr) -> list[int]:
    """The descriptor registers an HGMMA reads (none for other instructions)."""
    if not ins.opcode.startswith("HGMMA"):
        return []
    m = next(filter(None, (_GDESC.search(o) for o in ins.operands)), None)
    if m is None:
        return []
    r = int(m.group(1))
    a_in_regs = len(ins.operands) > 1 and re.match(r"^R\d+$", ins.operands[1]) is not None
    return [r + 2, r + 3] if a_in_regs else [r, r + 1, r + 2, r + 3]


def unwritten_descriptor_reads(sass: str) -> list[str]:
    """One line per HGMMA that reads a descriptor register not written on every path from the kernel's
    entry to it: `line N: HGMMA ... reads UR20, UR21, written on some paths only`."""
    blocks = parse(sass)
    if not blocks:
        return []
    preds: list[list[int]] = [[] for _ in blocks]
    for i, b in enumerate(blocks):
        for s in b.succs:
            preds[s].append(i)
    every = set(range(256))
    out: list[set[int]] = [set() if i == 0 else set(every) for i in range(len(blocks))]
    gen = [set().union(*(_writes(x) for x in b.instrs)) if b.instrs else set() for b in blocks]

    def entering(i: int) -> set[int]:          # written on every path into block i (unreached: vacuously all)
        if i == 0:
            return set()
        return set.intersection(*(out[p] for p in preds[i])) if preds[i] else set(every)

    changed = True
    while changed:
        changed = False
        for i in range(len(blocks)):
            new = entering(i) | gen[i]
            if new != out[i]:
                out[i], changed = new, True
    found = []
    for i, b in enumerate(blocks):
        have = entering(i)
        for ins in b.instrs:
            missing = [r for r in _reads(ins) if r not in have]
            if missing:
                regs = ", ".join(f"UR{r}" for r in missing)
                found.append(f"line {ins.line}: {ins.text} reads {regs}, written on some paths only")
            have |= _writes(ins)
    return found

