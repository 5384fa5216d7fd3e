"""Registration of Python window functions (`aggregates.python`) with a session's catalog,
and the planning check of the calls a query makes.

The statements layer cannot compile them (numba lives under runtime/cpu): the session hands
it a `compile` callable (`runtime.cpu.python_window.compile_window_function`) that raises
PlanError naming the function and numba's reason; registration compiles for float64 and int64
values (one of them must compile: the argument is not known yet), planning again for each
call's argument type. For a GPU plan the session also hands a `cuda_check`
(`runtime.gpu.python_window.cuda_problem`): whether the function compiles with numba's CUDA
target for the call's values, kept on the function (`WindowFunction.cuda`) for the planner,
which places the holistic step on the CPU with numba's reason when it does not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from sqlglot import exp

from mangonel.aggregates.python import WindowFunction, return_type, values_dtype
from mangonel.catalog.catalog import Catalog
from mangonel.catalog.types import SqlType
from mangonel.compiler import logical as lg
from mangonel.compiler.parse import parse_statement
from mangonel.compiler.window_syntax import GROUP_BY_WINDOW_FUNCTIONS
from mangonel.errors import CatalogError, SqlError

Compile = Callable[[WindowFunction, SqlType | None], None]
# None when the function compiles for CUDA for values of the argument type, else why not
CudaCheck = Callable[[WindowFunction, SqlType], str | None]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def register(
    catalog: Catalog,
    name: str,
    function: Callable[..., Any],
    returns: str | SqlType,
    replace: bool,
    compile: Compile | None,
    with_timestamps: bool = False,
) -> WindowFunction:
    """Check and register `function` as the window function `name` of `catalog`."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise CatalogError(
            f"window function name {name!r} is not an identifier",
            hint="letters, digits and underscores, not starting with a digit: trimmed_mean",
        )
    if not callable(function):
        raise CatalogError(
            f"window function {name!r}: {function!r} is not callable",
            hint="pass a Python function of one NumPy array returning one number",
        )
    try:
        sql_type = return_type(name, returns)
    except ValueError as error:
        raise CatalogError(str(error)) from None
    if not _free_name(name):
        raise CatalogError(
            f"window function name {name!r} is a built-in function of mangonel's SQL",
            hint="choose another name, e.g. my_" + name.lower(),
        )
    key = name.lower()
    if key in catalog.window_functions and not replace:
        raise CatalogError(
            f"a window function named {key!r} is already registered",
            hint="pass replace=True to replace it, or choose another name",
        )
    if not isinstance(with_timestamps, bool):
        raise CatalogError(
            f"window function {name!r}: with_timestamps must be True or False, "
            f"got {with_timestamps!r}"
        )
    window_function = WindowFunction(key, function, sql_type, with_timestamps)
    if compile is not None:
        compile(window_function, None)  # for float64 or int64 values
    catalog.window_functions[key] = window_function
    return window_function


# calls the window syntax reads besides GROUP_BY_WINDOW_FUNCTIONS' (window_syntax.py,
# sessions' syntax)
_WINDOW_CALLS = frozenset({"window_time", "session_window"})


def _free_name(name: str) -> bool:
    """Whether `name(x)` parses as a call of an unknown function (not MEDIAN, ABS, ...) that
    does not define a window either (Spark's `window(...)`, `session_window(...)`,
    `window_time(...)`: SQL reads those as the window, never as the user's function)."""
    if name.upper() in GROUP_BY_WINDOW_FUNCTIONS or name.lower() in _WINDOW_CALLS:
        return False
    try:
        select = parse_statement(f"SELECT {name}(x) FROM s")
    except SqlError:
        return False
    call = select.expressions[0] if isinstance(select, exp.Select) else None
    return isinstance(call, exp.Anonymous) and call.name.lower() == name.lower()


def python_calls(root: lg.LogicalNode) -> Iterator[tuple[lg.Aggregate, int]]:
    """The Python window function calls of a bound query, with their positions."""
    node: Any = root
    while node is not None and not isinstance(node, (lg.WindowAggregate, lg.StreamScan)):
        node = getattr(node, "child", None)
    if isinstance(node, lg.WindowAggregate):
        for position, aggregate in enumerate(node.aggregates):
            if aggregate.python is not None:
                yield aggregate, position


def check_calls(
    root: lg.LogicalNode,
    argument_types: dict[int, SqlType],
    compile: Compile | None,
    cuda_check: CudaCheck | None = None,
) -> None:
    """Compile each Python window function a query calls for its argument's type (raises
    when numba cannot); with `cuda_check` (a GPU plan) also record on the function whether
    it compiles for CUDA, once per function and values dtype."""
    for aggregate, position in python_calls(root):
        function = aggregate.python
        assert function is not None
        argument_type = argument_types[position]
        if compile is not None:
            compile(function, argument_type)
        dtype = values_dtype(argument_type).name
        if cuda_check is not None and dtype not in function.cuda:
            function.cuda[dtype] = cuda_check(function, argument_type)
