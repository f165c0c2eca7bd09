"""A Launcher's straight-line entry for the common call, generated once per kernel.

`Launcher.__call__` walks its argument plans in a loop: general, but about 2 us of Python for a
three-argument kernel, which a model calling small kernels per token pays on every call. The common call
passes torch tensors, Python ints, floats and bools, a tuple grid, no stream or an int one, on the device
the binary is loaded on and current. For that call this module writes one Python function per Launcher
with every check unrolled and every constant (dtype, range, alignment) folded in, which launches through
the C function directly. Anything else (another argument type, a failed check, a descriptor argument,
scratch memory, a launch hook, another device) goes to the general path unchanged: only there are errors
raised, so their messages are the general path's, and the fast path accepts only calls the general path
launches the same way (tests/test_fast_call.py compares the two).
"""
from __future__ import annotations

from typing import Any, Callable

from .cuda import GRID_MAX
from .descriptors import DESC_CACHE

_SLOW = "slow(grid, args, stream)"


def _tensor_checks(i: int, p, first: bool, want_cuda: bool, key: tuple | None = None, out: str = _SLOW) -> list[str]:
    """Lines checking tensor argument `a{i}` as `Launcher._check_tensor` and the pointer branch of
    `_validate` would, leaving its address in `p{i}` (the first tensor also sets `dev`); returning `out`
    where one fails. With `key` (the JIT's ("t", dtype, aligned, rank)) the address's alignment and the
    rank must be the key's too."""
    a = f"a{i}"
    cond = [f"type({a}) is not Tensor", f"not {a}.is_cuda" if want_cuda else f"{a}.is_cuda", f"{a}.dtype is not DT{i}"]
    rank = p.rank if key is None else key[3]
    if rank is not None:
        cond.append(f"{a}.dim() != {rank}")
    if p.contig:
        cond.append(f"not {a}.is_contiguous()")
    lines = [f"    if {' or '.join(cond)}: return {out}"]
    if first:
        lines.append(f"    dev = {a}.get_device()")
        if not want_cuda:       # a CPU tensor's device is -1: the general path then takes the current one
            lines.append("    if dev < 0: dev = current_device()")
    else:
        lines.append(f"    if {a}.get_device() != dev: return {out}" if want_cuda else
                     f"    if {a}.get_device() >= 0 and {a}.get_device() != dev: return {out}")
    lines.append(f"    p{i} = {a}.data_ptr()")
    if key is not None and not key[2]:
        lines.append(f"    if not p{i} & 15: return {out}")         # an aligned address: another specialization
    elif p.div16 or key is not None:
        lines.append(f"    if p{i} & 15: return {out}")
    return lines


def _launch_env(launcher) -> dict[str, Any]:
    """What both entries' launch lines read: the backend's current-device and current-stream functions (its
    raw C getters where it has them), its launch hooks, the direct C launch and the packed metadata."""
    backend = launcher._backend
    raw = getattr(backend, "raw_getters", None)
    current_device, current_stream = raw() if raw is not None else (backend.current_device, backend.current_stream)
    fn, coop, pdl = launcher._direct
    return {"current_device": current_device, "current_stream": current_stream, "hooks": backend.launch_hooks,
            "direct": fn, "coop": coop, "pdl": pdl, "packed": launcher._packed_metadata}


def _unpack(names: list[str], source: str) -> str:
    """The line binding `names` from the sequence `source` (one name keeps its trailing comma)."""
    return f"    {', '.join(names)}{',' if len(names) == 1 else ''} = {source}"


def _define(body: list[str], signature: str, label: str, env: dict[str, Any]) -> Callable[..., Any]:
    """The function `fast(signature)` of `body`'s lines, compiled in `env`; its source kept as `.source`."""
    src = f"def fast({signature}):\n" + "\n".join(body) + "\n"
    exec(compile(src, f"<{label}>", "exec"), env)
    fast = env["fast"]
    fast.source = src
    return fast


def build(launcher, kinds: tuple[int, int, int, int, int], key: tuple | None = None,
          miss: Any = None) -> Callable[..., Any] | None:
    """`fast(grid, args, stream)` for `launcher` (args: a tuple, one value per runtime parameter), or None
    where every call must take the general path (descriptor arguments, no direct C launch, no parameters
    that are tensors to take the device from). `kinds`: the launcher's argument plan kinds (pointer, int,
    float, bool, descriptor).

    With `key` (the JIT's specialization key of each argument, `jit.arg_key`'s tuples) the entry takes
    exactly the calls of that specialization and returns `miss` for any other, launching nothing: the JIT's
    own lookup then takes that one (a call of another alignment must get its own specialization, not the
    general path's error). None where a key's kind has no straight line (an int passed as an address)."""
    _PTR, _INT, _FLOAT, _BOOL, _DESC = kinds
    plans = launcher._plans
    direct = launcher._direct
    if direct is None or any(p.kind == _DESC for p in plans) or not any(p.kind == _PTR for p in plans):
        return None
    want = {_PTR: "t", _INT: "i", _FLOAT: "f", _BOOL: "b"}
    if key is not None and (len(key) != len(plans) or any(k[0] != want[p.kind] for k, p in zip(key, plans))):
        return None
    out = _SLOW if key is None else "MISS"
    env = _launch_env(launcher)
    env.update(Tensor=launcher._Tensor, slow=launcher._general_call, functions=launcher._functions, MISS=miss,
               G0=GRID_MAX[0], G1=GRID_MAX[1], G2=GRID_MAX[2])
    names = [f"a{i}" for i in range(len(plans))]
    body = [f"    if len(args) != {len(plans)}: return {out}",
            _unpack(names, "args")]
    flat = []
    first = True
    for i, p in enumerate(plans):
        a = f"a{i}"
        k = key[i] if key is not None else None
        if p.kind == _PTR:
            env[f"DT{i}"] = p.torch_dtype
            body += _tensor_checks(i, p, first, launcher._want_cuda, k, out)
            first = False
            flat.append(f"p{i}")
        elif p.kind == _INT:
            cond = f"type({a}) is not int or not {p.lo} <= {a} <= {p.hi}"
            if k is not None:           # the key's divisibility and range, either way
                cond += f" or ({a} % 16 == 0) is not {k[1]} or (-2**31 <= {a} < 2**31) is not {k[2]}"
            elif p.div16:
                cond += f" or {a} % 16"
            body.append(f"    if {cond}: return {out}")
            flat.append(a)
        elif p.kind == _FLOAT:
            env[f"F{i}"] = p.fmax
            body.append(f"    if type({a}) is not float or not -F{i} <= {a} <= F{i}: return {out}")
            flat.append(a)
        elif p.kind == _BOOL:
            body.append(f"    if {a} is True: b{i} = 1")
            body.append(f"    elif {a} is False: b{i} = 0")
            body.append(f"    else: return {out}")
            flat.append(f"b{i}")
    body += [
        f"    if type(grid) is not tuple: return {out}",
        "    n = len(grid)",
        "    if n == 1: g0, g1, g2 = grid[0], 1, 1",
        "    elif n == 3: g0, g1, g2 = grid",
        "    elif n == 2: g0, g1 = grid; g2 = 1",
        f"    else: return {out}",
        "    if type(g0) is not int or type(g1) is not int or type(g2) is not int or not (0 < g0 <= G0 and "
        f"0 < g1 <= G1 and 0 < g2 <= G2): return {out}",
        "    fn = functions.get(dev)",
        f"    if fn is None or dev != current_device(): return {out}",
        "    if stream is None: stream = current_stream(dev)",
        f"    elif type(stream) is not int: return {out}",
        f"    if hooks()[0] is not None: return {out}",
        f"    direct(g0, g1, g2, stream, fn, coop, pdl, None, None, packed, None, None, None, {', '.join(flat)})",
    ]
    label = "fast launch" if key is None else "exact launch"
    return _define(body, "grid, args, stream=None", f"{label} of {launcher.kernel_name}", env)


def _prepared_launch(prepared, env: dict[str, Any], fallback: str, misaligned: str) -> list[str] | None:
    """The lines that launch `prepared` with its slots' new addresses in `p0`, `p1`, ... (slot order): the
    alignments the launch relies on checked (`misaligned` returned where one breaks), a descriptor slot's
    CUtensorMap read from the descriptor cache (`fallback` returned on a miss: the general path fills it), the
    rest of its flat arguments constants in `env`; `fallback` returned off its device or with a launch hook
    set. None where no straight line applies (no direct C launch, an empty grid)."""
    launcher = prepared.launcher
    g0, g1, g2 = prepared.grid
    if launcher._direct is None or not g0 * g1 * g2:
        return None
    env.update(_launch_env(launcher))
    env.update(fn=launcher._functions[prepared.dev], dev=prepared.dev, described=DESC_CACHE.get)
    at = {pos: i for i, (pos, _, _, _) in enumerate(prepared.slots)}
    lines = []
    unaligned = [f"p{i} & 15" for i, (_, align16, _, _) in enumerate(prepared.slots) if align16]
    if unaligned:
        lines.append(f"    if {' or '.join(unaligned)}: return {misaligned}")
    for i, (_, _, _, tail) in enumerate(prepared.slots):
        if tail is not None:
            # the last address and its descriptor (one tuple, swapped whole: safe across threads; a weight or a
            # reused activation buffer comes back at the same address), else the cache's, keyed (address, *tail)
            env[f"DK{i}"], env[f"LAST{i}"] = tail, [(None, None)]
            lines += [f"    m = LAST{i}[0]",
                      f"    if m[0] == p{i}: d{i} = m[1]",
                      "    else:",
                      f"        d{i} = described((p{i}, *DK{i}))",
                      f"        if d{i} is None: return {fallback}",
                      f"        LAST{i}[0] = (p{i}, d{i})"]
    flat = []
    for j, v in enumerate(prepared.flat):
        if j in at:
            i = at[j]
            flat.append(f"p{i}" if prepared.slots[i][3] is None else f"d{i}")
        else:
            env[f"F{j}"] = v
            flat.append(f"F{j}")
    return lines + [
        f"    if dev != current_device(): return {fallback}",
        "    if stream is None: stream = current_stream(dev)",
        f"    if hooks()[0] is not None: return {fallback}",
        f"    direct({g0}, {g1}, {g2}, stream, fn, coop, pdl, None, None, packed, None, None, None, {', '.join(flat)})",
    ]


def build_prepared(prepared) -> Callable[..., Any] | None:
    """`fast(ptrs, stream)` for a `PreparedLaunch` (a declared kernel's replay, a split-K reduction, the GEMM's
    repeated call): the new addresses checked and placed straight into the C call (a descriptor slot's
    CUtensorMap from the descriptor cache), the rest of its flat arguments constants; False where an address
    breaks an alignment the launch relies on, the general `PreparedLaunch.general` where a descriptor is not
    cached yet, the device is not current or a launch hook is set. None where it does not apply (no direct C
    launch, an empty grid)."""
    env: dict[str, Any] = {"general": prepared.general}
    launch = _prepared_launch(prepared, env, "general(ptrs, stream)", "False")
    if launch is None:
        return None
    names = [f"p{i}" for i in range(len(prepared.slots))]
    body = [f"    if len(ptrs) != {len(names)}: return general(ptrs, stream)",
            _unpack(names, "ptrs"), *launch, "    return True"]
    return _define(body, "ptrs, stream=None", f"prepared launch of {prepared.launcher.kernel_name}", env)


def build_replay(prepared, inputs: tuple, outputs: tuple, skip: Callable[[], bool]) -> Callable[..., Any] | None:
    """`fast(args)` for one call key of a declared kernel's replay: the positional tensors `args` checked
    against `inputs` (per tensor: the torch.Size, dtype and device index it must have, contiguous), the
    outputs made by `outputs` (per output: (allocator, extents, dtype) as `Replay` keeps them: extents None
    for `allocator(first input)`), and `prepared` launched with the inputs' then the outputs' addresses on
    the current stream. The output (a tuple for several), or None, launching nothing, for any other call
    (another key, an alignment the launch relies on broken, `skip()` true, off its device, a launch hook
    set): the caller's general path takes that one. None where no straight line applies."""
    launcher = prepared.launcher
    if not inputs or len(prepared.slots) != len(inputs) + len(outputs):
        return None
    env: dict[str, Any] = {"Tensor": launcher._Tensor, "skip": skip}
    launch = _prepared_launch(prepared, env, "None", "None")
    if launch is None:
        return None
    names = [f"a{i}" for i in range(len(inputs))]
    body = [f"    if len(args) != {len(inputs)} or skip(): return None",
            _unpack(names, "args")]
    for i, (shape, dtype, device) in enumerate(inputs):
        env[f"S{i}"], env[f"DT{i}"] = shape, dtype
        body.append(f"    if type(a{i}) is not Tensor or a{i}.dtype is not DT{i} or a{i}.shape != S{i} or "
                    f"a{i}.get_device() != {int(device)} or not a{i}.is_contiguous(): return None")
    body += [f"    p{i} = a{i}.data_ptr()" for i in range(len(inputs))]
    for j, (make, extents, dtype) in enumerate(outputs):
        env[f"M{j}"], env[f"E{j}"], env[f"T{j}"] = make, extents, dtype
        body.append(f"    o{j} = M{j}(a0)" if extents is None else f"    o{j} = M{j}(a0, E{j}, dtype=T{j})")
        body.append(f"    p{len(inputs) + j} = o{j}.data_ptr()")
    body += ["    stream = None", *launch,
             f"    return {', '.join(f'o{j}' for j in range(len(outputs)))}{',' if len(outputs) > 1 else ''}"]
    return _define(body, "args", f"replay of {launcher.kernel_name}", env)
