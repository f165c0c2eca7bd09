"""Reading Triton's PTX line by line, for the PTX post-passes (prologue.py).

Triton prints one instruction per line; the passes only need to tell labels, instructions (with their
predicate, opcode and operands), barriers and side-effect-free arithmetic apart, and to skip what is
not code (comments, directives such as `.loc`, the braces around inline asm)."""
from __future__ import annotations

import re

LABEL = re.compile(r"^\s*\$?[\w.$]+:")
INSTR = re.compile(r"^\s*(?P<pred>@!?%\w+\s+)?(?P<op>[a-z][\w.:]*)\b(?P<rest>[^;]*);")
BARRIER = re.compile(r"^(?:bar|barrier)\.sync(?:\.aligned)?$")
_BARRIER_ARGS = re.compile(r"^\s*(?P<id>\d+)\s*(?:,\s*(?P<count>\d+))?\s*$")
# ops with no memory effect that Triton emits around address arithmetic
PLAIN = ("mov", "add", "sub", "mul", "mad", "shl", "shr", "and", "or", "xor", "not", "setp", "selp", "shfl",
         "elect", "cvta", "min", "max", "div", "rem", "abs", "neg", "cvt", "prmt", "bfe", "bfi", "lop3", "popc",
         "clz", "brev", "vote", "ld.param", "mul24", "mad24", "sad")


def is_plain(op: str) -> bool:
    return any(op == p or op.startswith(p + ".") for p in PLAIN)


def statements(lines: list[str], start: int, step: int = 1):
    """(line index, code, what) from line `start` on (backwards with step=-1): `what` is "label", the
    instruction's match, or None for a line the pass does not know; blank lines, comments, directives
    (.loc, .reg) and inline-asm braces are skipped."""
    for i in range(start, len(lines) if step > 0 else -1, step):
        code = lines[i].split("//", 1)[0].strip()
        if code and not code.startswith((".", "{", "}")):
            yield i, code, "label" if LABEL.match(code) else INSTR.match(code)


def barrier_args(m) -> re.Match | None:
    """The id and thread count of a barrier instruction's match, else None."""
    return _BARRIER_ARGS.match(m.group("rest")) if BARRIER.match(m.group("op")) else None
