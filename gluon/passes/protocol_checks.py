"""Pass (run by warp_spec after its own checks): more barrier-protocol and async-ordering mistakes,
each a `GluonError` whose message starts with a stable code (docs/DIAGNOSTICS.md lists them).

Conservative like the rest of warp_spec: each check reports only what cannot work, and skips what it
cannot decide (a completer under an `if`, a phase carried by the loop, loops of different bounds).

`check_protocol` runs the families in this order, over the kernel's ops in program order; each module's
docstring says what its checks catch and why:

* GL101-GL107, barrier protocol: gluon/passes/protocol_barriers.py
* GL201-GL205, async ordering: gluon/passes/protocol_async.py
* GL206-GL207, the wait of a programmatic dependent launch: gluon/passes/protocol_griddep.py
* GL301-GL302, register layouts against the warps that run them: gluon/passes/protocol_layouts.py
* GL401-GL405, shared memory: gluon/passes/protocol_async.py
"""
from __future__ import annotations

from .. import ir
from .analysis import sites
from .protocol_async import check_async_ordering, check_shared
from .protocol_barriers import check_barriers
from .protocol_griddep import check_griddep
from .protocol_common import err
from .protocol_layouts import check_layout_sizes

__all__ = ["check_protocol", "err"]


def check_protocol(kernel: ir.Kernel) -> None:
    where = sites(kernel)
    ordered = sorted(where, key=lambda o: where[o].index)
    num_ctas = int(kernel.attrs.get("num_ctas", 1))
    check_barriers(ordered, where, num_ctas)
    check_async_ordering(kernel, ordered, where)
    check_griddep(ordered, where)
    check_layout_sizes(kernel, ordered, where)
    check_shared(ordered, where)
