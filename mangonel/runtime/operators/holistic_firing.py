"""Parts of `holistic.HolisticTimeWindows`' firing: the tuner's knobs and their values, the
exact functions' key-major row order put back, and the approximate aggregates' answers of a
firing's result batches in as few sketch calls as their memory bound allows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mangonel.compiler.holistic import HolisticPlan, gpu_forms_to_try, windows_per_launch
from mangonel.runtime.operators.tuner import Knob

# values of the windows-per-launch knob: the planned (largest) value and up to LADDER_STEPS
# quarters of it below (a 4^4 = 256x range: from one launch per firing down to small chunks)
LADDER_STEPS = 4
# result batches of one firing whose windows lie up to this many panes further apart than
# their own spans are still answered together (`near_batches`)
JOINED_MARGIN_PANES = 4096


def chunk_ladder(largest: int, start: int) -> tuple[int, ...]:
    """The windows-per-launch values the tuner may pick, ascending: `largest` (the bound the
    run arrays must stay under, `compiler.holistic.windows_per_launch`), its quarters, and
    the start value."""
    values = {max(1, largest // 4**step) for step in range(LADDER_STEPS + 1)} | {start}
    return tuple(sorted(values))


def firing_knobs(
    plan: HolisticPlan, planned: dict[str, Any], raw_values: bool, panes_per_window: int
) -> list[Knob]:
    """The knobs the tuner may move from the `planned` values: none when the plan's tuning
    is off, there are no raw values (sketches only) or the user fixed every knob."""
    if not plan.tunes() or not raw_values:
        return []
    fixed = dict(plan.fixed)
    knobs = []
    if "windows_per_launch" not in fixed:
        start = planned["windows_per_launch"]
        largest = max(start, windows_per_launch(panes_per_window))
        knobs.append(Knob("windows_per_launch", chunk_ladder(largest, start), start))
    if plan.gpu_form is not None and "gpu_form" not in fixed:
        forms = gpu_forms_to_try(panes_per_window, plan.gpu_form)
        if len(forms) > 1:
            knobs.append(Knob("gpu_form", forms, plan.gpu_form))
    return knobs


def in_row_order(
    read: Callable[[], tuple[np.ndarray, np.ndarray]], inverse: np.ndarray | None
) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    """`read`'s (n, value), put back in the result batch's row order where the rows were
    evaluated key by key (`inverse`: the key-major order's inverse permutation)."""
    if inverse is None:
        return read

    def reordered() -> tuple[np.ndarray, np.ndarray]:
        n, value = read()
        return n[inverse], value[inverse]

    return reordered


def near_batches(
    keyed: list[tuple[np.ndarray, np.ndarray]], panes_per_window: int
) -> list[list[int]]:
    """Consecutive non-empty result batches (`keyed`: per batch its rows' key slots and
    first panes) in groups whose windows together span at most twice the panes theirs span
    one by one, plus JOINED_MARGIN_PANES: a combined firing's batches are neighbours in
    event time and join; segments far apart (a gap in the stream) do not, since the sparse
    sketch form's index work grows with the panes a call's rows span."""
    groups: list[list[int]] = []
    low = high = spans = 0
    for number, (_, first_panes) in enumerate(keyed):
        if not len(first_panes):
            continue
        first, end = int(first_panes.min()), int(first_panes.max()) + panes_per_window
        if groups:
            joined_low, joined_high = min(low, first), max(high, end)
            if joined_high - joined_low <= 2 * (spans + end - first) + JOINED_MARGIN_PANES:
                groups[-1].append(number)
                low, high, spans = joined_low, joined_high, spans + end - first
                continue
        groups.append([number])
        low, high, spans = first, end, end - first
    return groups


def sketch_answers(
    sketches: Any,  # noqa: ANN401 - sketch_panes.SketchPanes
    positions: list[int],
    keyed: list[tuple[np.ndarray, np.ndarray]],
    panes_per_window: int,
) -> list[dict[int, tuple[np.ndarray, np.ndarray]]]:
    """Per result batch (`keyed`: its rows' key slots and first panes, host int64), each
    approximate aggregate's (at `positions`) (non-NULL count, result) per row. The sketch
    answer bounds its own memory (`SketchPanes.answer`), so the rows are not cut into the
    exact selection's chunks: the batches of one group (`near_batches`) are answered in one
    call per aggregate (on the GPU's ring table one launch and one read)."""
    answers: list[dict[int, tuple[np.ndarray, np.ndarray]]] = [{} for _ in keyed]
    if not positions:
        return answers
    for group in near_batches(keyed, panes_per_window):
        if len(group) == 1:  # no copy of the rows' arrays
            slots, first_panes = keyed[group[0]]
        else:
            slots = np.concatenate([keyed[number][0] for number in group])
            first_panes = np.concatenate([keyed[number][1] for number in group])
        bounds = np.cumsum([0] + [len(keyed[number][0]) for number in group]).tolist()
        for position in positions:
            n, value = sketches.answer(position, slots, first_panes, panes_per_window)
            for index, number in enumerate(group):
                rows = slice(bounds[index], bounds[index + 1])
                answers[number][position] = (n[rows], value[rows])
    return answers
