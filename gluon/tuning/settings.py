"""The spec's [tuning] values as the tuner reads them (`_t`: the spec's value, else the default), the
SpecError naming the spec file and a field (`_spec_error`), and the spec's shapes checked against its
template (`_check_shapes`, and with the dtypes `check_against_template`), for the tuner's modules and
`gluon check`."""
from __future__ import annotations

from .spec_errors import SpecError


def _t(spec, name, default=None):
    v = getattr(getattr(spec, "tuning", None), name, default)
    return default if v is None else v


def _spec_error(spec, field: str, problem: str, allowed: str = "") -> Exception:
    """A SpecError naming the spec file and the field."""
    return SpecError(getattr(spec, "source", None), None, field, problem, allowed=allowed)


def _check_shapes(spec, template) -> None:
    """SpecError (file, line, shapes[i]) for the first shape the template does not take
    (`template.shape_problem`: the number of dims, sizes >= 1, a template's own rules such as flag dims)."""
    dims = tuple(getattr(template, "dims", ()))
    check = getattr(template, "shape_problem", None)
    if check is None:                            # a template that is no TuningTemplate: the number of dims
        def check(shape):
            return f"{len(shape)} dims where it takes {len(dims)}" if dims and len(shape) != len(dims) else None
    for i, shape in enumerate(getattr(spec, "shapes", ())):
        why = check(tuple(shape))
        if why:
            allowed = f"[{', '.join(dims)}]" if dims else ""
            shown = "[" + ", ".join(str(int(d)) for d in shape) + "]"
            problem = f"{shown} does not fit template {getattr(template, 'name', '?')}: {why}"
            if hasattr(spec, "error"):
                raise spec.error(("shapes", i), problem, value=list(shape), allowed=allowed)
            raise _spec_error(spec, f"shapes[{i}]", problem, allowed=allowed)


def check_against_template(spec, template) -> None:
    """The spec-level mistakes, found once before any config is looked at: a dtype the template does not
    take (SpecError at dtypes[i]), then the shapes (`_check_shapes`)."""
    known = tuple(getattr(template, "dtypes", ()) or ())
    for i, d in enumerate(getattr(spec, "dtypes", ())):
        if known and d not in known:
            problem = f"template {getattr(template, 'name', '?')} does not take {d}"
            if hasattr(spec, "error"):
                raise spec.error(("dtypes", i), problem, value=d, allowed=", ".join(known))
            raise _spec_error(spec, f"dtypes[{i}]", problem, allowed=", ".join(known))
    archs = tuple(getattr(template, "archs", ()) or ())
    arch = str(getattr(getattr(spec, "kernel", None), "arch", ""))
    if archs and arch and arch not in archs:
        problem = f"template {getattr(template, 'name', '?')} runs on {', '.join(archs)}, not {arch}"
        if hasattr(spec, "error"):
            raise spec.error(("kernel", "arch"), problem, value=arch, allowed=", ".join(archs))
        raise _spec_error(spec, "kernel.arch", problem, allowed=", ".join(archs))
    _check_params(spec, template)
    _check_values(spec, template)
    _check_shapes(spec, template)


def _check_values(spec, template) -> None:
    """SpecError at the first parameter value the template can never take (`template.value_problem`),
    such as two producer warps for a kernel with one."""
    check = getattr(template, "value_problem", None)
    space = getattr(spec, "space", None)
    if check is None or space is None or not hasattr(spec, "param_origin"):
        return
    for name, domain in space.params.items():
        values = domain.options()
        if len(values) > 4096:
            continue
        for v in values:
            why = check(name, v)
            if why:
                file, line, field = spec.param_origin(name)
                raise SpecError(file, line, field, f"{name}={v!r}: {why}", value=v)


def _check_params(spec, template) -> None:
    """SpecError at the first parameter of the space the template does not take (where it names its params)."""
    import difflib
    known = tuple(getattr(template, "params", ()) or ())
    space = getattr(spec, "space", None)
    if not known or space is None or not hasattr(spec, "param_origin"):
        return
    for name in space.params:
        if name not in known:
            file, line, field = spec.param_origin(name)
            near = difflib.get_close_matches(name, known, n=1)
            raise SpecError(file, line, field, f"template {getattr(template, 'name', '?')} has no parameter "
                            f"'{name}'", value=name, allowed=", ".join(known),
                            suggestion=near[0] if near else None)
