"""A declared kernel's repeated call: the launch of a call seen before, with the new tensors' addresses.

`gluon.load(name)(x)` on a declared kernel reads its arguments against the declaration, works out the
extents of its outputs, allocates them and launches (declared.py). A call whose positional tensors have the
shapes, strides, dtypes and devices of one seen before (`call_key`) gets what that call worked out:
`Replay` allocates the outputs and re-issues the first call's validated launch
(gluon/runtime/prepared.py) with the inputs' and outputs' addresses. Made only where nothing else of the
call can differ: inputs by position only, no scalars given, every tensor 16-byte aligned (the specialization
the replay launches; a later input that is not gets the full path).
"""
from __future__ import annotations

from ..jit import _interpret_enabled
from ..runtime import fast_call

REPLAYS_MAX = 256


def call_key(args: tuple) -> tuple | None:
    """What a call of positional tensors depends on besides their addresses, or None if one is not a tensor.
    A declared kernel takes dense tensors only (a strided one is refused by the full path), so the shape and
    whether it is contiguous stand for the strides."""
    T = tensor_type()
    if len(args) == 1:                      # the common call: no list to build, one level of tuple
        a = args[0]
        return (a.shape, a.is_contiguous(), a.dtype, a.get_device()) if type(a) is T else None
    key = []
    for a in args:
        if type(a) is not T:
            return None
        key.append((a.shape, a.is_contiguous(), a.dtype, a.get_device()))
    return tuple(key)


_TENSOR = None


def tensor_type():
    """torch.Tensor, imported on first use (the module loads without torch)."""
    global _TENSOR
    if _TENSOR is None:
        import torch
        _TENSOR = torch.Tensor
    return _TENSOR


class Replay:
    """The outputs to allocate, in the declaration's order, each as (allocator, extents, dtype): an output
    of the first input's extents and dtype is torch.empty_like / zeros_like of it (the cheapest allocation),
    another Tensor.new_empty / new_zeros of it; and the prepared launch taking the inputs' then the outputs'
    addresses."""

    __slots__ = ("launch", "outputs", "single", "like", "entry")

    def __init__(self, launch, outputs: tuple, inputs: tuple = ()):
        """`inputs`: per positional tensor of the call this replays, (torch.Size, dtype, device index): what
        `entry`, the call's straight-line function (fast_call.build_replay), checks a later call against."""
        self.launch, self.outputs, self.single = launch, outputs, len(outputs) == 1
        self.entry = fast_call.build_replay(launch, inputs, outputs, _interpret_enabled) if inputs else None
        # the common call: one output made like the first input (its allocator), launched through the
        # prepared launch's straight-line function when it has one
        self.like = outputs[0][0] if self.single and outputs[0][1] is None else None

    def __call__(self, args: tuple):
        """The outputs, launched, or None where an input's address breaks the alignment the launch assumes or
        the interpreter is on (a replay is made on the GPU only)."""
        if _interpret_enabled():
            return None
        first = args[0]
        like = self.like
        if like is not None and len(args) == 1:
            out = like(first)
            return out if self.launch((first.data_ptr(), out.data_ptr())) else None
        outs = [make(first) if extents is None else make(first, extents, dtype=dt) for make, extents, dt in self.outputs]
        ptrs = [a.data_ptr() for a in args]
        ptrs += [o.data_ptr() for o in outs]
        if not self.launch(ptrs):
            return None
        return outs[0] if self.single else tuple(outs)


def _allocator(zeroed: bool, extents: tuple, dtype, first) -> tuple:
    import torch
    if tuple(first.shape) == extents and first.dtype == dtype:
        return (torch.zeros_like if zeroed else torch.empty_like), None, None
    return (torch.Tensor.new_zeros if zeroed else torch.Tensor.new_empty), extents, dtype


class Replays:
    """The replays of calls seen before, by the caller's key of a call: at most REPLAYS_MAX (then no more are
    kept; the full path serves the rest)."""

    def __init__(self):
        self._kept: dict = {}

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, key) -> Replay | None:
        """The replay kept for `key`, or None. A key that does not hash raises TypeError."""
        return self._kept.get(key)

    def keep(self, key, replay: Replay | None) -> None:
        if replay is not None and len(self._kept) < REPLAYS_MAX:
            self._kept[key] = replay


def make_replay(launched, inputs: dict, runtime: list, input_names: tuple, outputs: tuple) -> Replay | None:
    """The Replay of a call just launched (`launched`: the kernel run() launched, its grid and arguments), or
    None where a repeat could differ in more than addresses (a kernel whose arguments need binding,
    scalars the caller gave, a tensor not 16-byte aligned, no launch at all)."""
    if launched is None:
        return None
    kernel, grid, args = launched
    prepare = getattr(kernel, "prepare", None)          # a Launcher (a CompiledKernel binds its arguments first)
    if prepare is None or "@given" in inputs or _interpret_enabled() or not input_names:
        return None
    names = (*input_names, *(t.name for t in outputs))
    if any(inputs[n].data_ptr() & 15 for n in names):
        return None
    addressed = tuple(runtime.index(n) for n in names)
    first = inputs[input_names[0]]
    made = tuple(_allocator(t.fill == "zeros", tuple(inputs[t.name].shape), inputs[t.name].dtype, first) for t in outputs)
    given = tuple((inputs[n].shape, inputs[n].dtype, inputs[n].get_device()) for n in input_names)
    return Replay(prepare(grid, args, addressed), made, given)
