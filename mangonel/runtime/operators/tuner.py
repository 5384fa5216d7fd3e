"""An online auto-tuner: picks a configuration from a finite, ordered space of knobs by the
measured cost per unit of work while the query runs, never stopping the stream.

The operator times its tuned step (`time.perf_counter` around it; on the GPU the step ends
with the device-to-host copy of its results, a sync) and reports `observe(units, seconds)`
once per step, `units` being the work done (values read by the firing's windows), and how
many input batches the step served (a firing combined over batches held in memory serves
several, `window.COMBINED_FIRING_BATCHES`). Between two steps it reads `config` and runs the
next step with it: a configuration applies to whole steps, and the tuned knobs change how
results are computed, never what they are.

The search (GASSER, ../shared/papers/gasser-autotuned-gpu-sliding-window.txt, calibrates
offline-style for tens of seconds over a low-discrepancy sample and an interpolated model;
here the space is small and ordered, so a measured hill-climb suffices):

- a candidate is compared with the centre (at first the plan's configuration) in one paired
  run, centre-candidate-candidate-centre (`samples` = 2 steps each; ABBA): a stream whose
  cost per unit drifts while its windows fill up would otherwise favour whichever ran
  later. Each side costs its summed seconds over its summed units (a ratio estimator: big
  steps weigh more). The first step a configuration ever runs is discarded (`warmup`: a new
  GPU form compiles its kernel then), run before the paired steps;
- candidates are the centre's neighbours (one knob one value up or down), the direction of
  the last move first; the first that beats the centre by more than `tolerance` becomes the
  centre (and is cheaper in both halves of the paired run: one slow step cannot decide;
  first-improvement hill-climbing: a move along a slope costs one comparison);
  when every neighbour lost to the centre, the tuner settles on it;
- settled, it keeps watching: over the first `window` steps it takes a baseline (median cost
  per unit, units per input batch, input rate), then compares the median of the last `window` steps
  against it. A change by more than `drift` x (either way) of any of the three restarts the
  search from the settled configuration (a re-tune); a timer never does.

`TunerMetrics` is what `metrics` and EXPLAIN ANALYZE show.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Index = tuple[int, ...]  # one value index per knob


@dataclass(frozen=True)
class Knob:
    """One tuned parameter: its allowed values in order (neighbours are adjacent values) and
    the value the search starts from."""

    name: str
    values: tuple[Any, ...]
    start: Any

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"knob {self.name!r} has no values")
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"knob {self.name!r} repeats a value: {self.values}")
        if self.start not in self.values:
            raise ValueError(f"knob {self.name!r} starts at {self.start!r}, not one of its values")


@dataclass(frozen=True)
class TunerMetrics:
    """The tuner's state for `metrics` and EXPLAIN ANALYZE.

    state: "exploring", "settled", "off" (tuning switched off: the plan's values) or "fixed"
        (every knob pinned by the user: nothing to tune).
    config: the knob values the next step runs with.
    tried: every paired run, in order, over every search (a re-tune measures anew): the
        candidate configuration, its cost and the centre's in the same run (seconds per unit
        of work).
    converge_seconds: wall seconds from the first step of the latest completed search to its
        settling (None until one settles; a re-tune's search replaces it when it settles).
    retunes: searches restarted by a drift; retune_reason: the latest one's cause.
    steps: steps observed; switches: configuration changes applied between steps.
    configurations: distinct configurations measured (GASSER's count of tried ones).
    """

    state: str
    config: dict[str, Any]
    tried: tuple[tuple[dict[str, Any], float, float], ...] = ()
    converge_seconds: float | None = None
    retunes: int = 0
    retune_reason: str | None = None
    steps: int = 0
    switches: int = 0
    configurations: int = 0

    def describe(self) -> str:
        """One line: `tuner: settled config=[...] configurations=4 comparisons=3 ...`."""
        config = " ".join(f"{k}={v}" for k, v in self.config.items())
        parts = [f"tuner: {self.state}", f"config=[{config}]"]
        if self.state in ("exploring", "settled"):
            parts.append(f"configurations={self.configurations} comparisons={len(self.tried)}")
            if self.converge_seconds is not None:
                parts.append(f"converged_in={self.converge_seconds:.3f}s")
            parts += [f"steps={self.steps}", f"switches={self.switches}"]
            parts.append(f"retunes={self.retunes}")
            if self.retune_reason is not None:
                parts.append(f"last_retune=({self.retune_reason})")
        return " ".join(parts)

    def tried_lines(self) -> list[str]:
        """Each configuration measured with its cost, for EXPLAIN ANALYZE."""
        return [
            "  tried "
            + " ".join(f"{k}={v}" for k, v in config.items())
            + f": {cost:.3e} s/unit (centre {centre:.3e})"
            for config, cost, centre in self.tried
        ]


class Tuner:
    """The search and drift detector of the module docstring over `knobs`; `clock` is
    `time.perf_counter` unless a test injects one (it times convergence and input rates;
    the operator times its own steps with the same clock through `clock`)."""

    def __init__(
        self,
        knobs: Sequence[Knob],
        *,
        clock: Callable[[], float] = time.perf_counter,
        samples: int = 2,
        warmup: int = 1,
        tolerance: float = 0.05,
        drift: float = 2.0,
        window: int = 5,
    ) -> None:
        if not knobs:
            raise ValueError("a tuner needs at least one knob")
        if samples < 1 or warmup < 0 or window < 1 or drift <= 1 or not 0 <= tolerance < 1:
            raise ValueError(
                "samples >= 1, warmup >= 0, window >= 1, drift > 1, 0 <= tolerance < 1"
            )
        self.knobs = tuple(knobs)
        self.clock = clock
        self.samples = samples
        self.warmup = warmup
        self.tolerance = tolerance
        self.drift = drift
        self.window = window
        self.centre: Index = tuple(k.values.index(k.start) for k in self.knobs)
        self.current: Index = self.centre
        self.state = "exploring"
        self.tried: list[tuple[dict[str, Any], float, float]] = []
        self._lost: set[Index] = set()  # neighbours known worse than the centre
        self._direction: Index | None = None  # the last move, as index differences
        self._candidate: Index | None = None
        self._schedule: list[Index] = []  # the comparison's remaining steps
        self._measured: dict[Index, list[tuple[float, float]]] = {}  # (units, seconds)
        self._runs: dict[Index, int] = {}  # steps each configuration ran (warm-up)
        self._measured_ever: dict[Index, int] = {}  # measured steps per configuration
        self.search_started: float | None = None
        self.converge_seconds: float | None = None
        self.retunes = 0
        self.retune_reason: str | None = None
        self.steps = 0
        self.switches = 0
        # settled: the baseline (cost per unit, units per batch, input rate) and recent values
        self._baseline: dict[str, float] | None = None
        self._recent: dict[str, deque[float]] = {
            name: deque(maxlen=window) for name in ("cost", "units", "rate")
        }
        self._last_input: float | None = None
        self._next_comparison()

    # -- what the operator reads and reports ----------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        """The knob values the next step runs with."""
        return self._config(self.current)

    def observe_input(self, tuples: int) -> None:
        """`tuples` arrived now (one batch): the input rate is tuples per second between
        consecutive arrivals."""
        now = self.clock()
        last, self._last_input = self._last_input, now
        if last is None or now <= last or tuples <= 0:
            return
        self._recent["rate"].append(tuples / (now - last))
        self._check_drift()

    def observe(self, units: float, seconds: float, batches: int = 1) -> None:
        """One step ran with `config`: `units` of work (> 0) in `seconds`, serving `batches`
        input batches (the work signal is per batch: whether a firing waited for the next
        batches is no change of the stream)."""
        if units <= 0:
            return
        self.steps += 1
        if self.search_started is None:
            self.search_started = self.clock()
        if self.state == "settled":
            self._recent["cost"].append(seconds / units)
            self._recent["units"].append(units / max(1, batches))
            self._check_drift()
            return
        runs = self._runs.get(self.current, 0)
        self._runs[self.current] = runs + 1
        self._schedule.pop(0)
        if runs >= self.warmup:  # a first step (compiling, warming caches) is no measure
            self._measured.setdefault(self.current, []).append((units, seconds))
            self._measured_ever[self.current] = self._measured_ever.get(self.current, 0) + 1
        if self._schedule:
            self._switch(self._schedule[0])
            return
        self._compare()

    def metrics(self) -> TunerMetrics:
        return TunerMetrics(
            self.state,
            self.config,
            tuple(self.tried),
            self.converge_seconds,
            self.retunes,
            self.retune_reason,
            self.steps,
            self.switches,
            len({index for index, steps in self._measured_ever.items() if steps}),
        )

    # -- the search -----------------------------------------------------------------------

    def _config(self, index: Index) -> dict[str, Any]:
        return {k.name: k.values[i] for k, i in zip(self.knobs, index, strict=True)}

    def _neighbours(self, index: Index) -> list[Index]:
        """Configurations one knob one value away: the last move's direction first, then in
        knob order (down before up)."""
        found = []
        for position, knob in enumerate(self.knobs):
            for step in (-1, 1):
                value = index[position] + step
                if 0 <= value < len(knob.values):
                    found.append(index[:position] + (value,) + index[position + 1 :])
        if self._direction is not None:
            ahead = tuple(i + d for i, d in zip(index, self._direction, strict=True))
            if ahead in found:
                found.remove(ahead)
                found.insert(0, ahead)
        return found

    def _switch(self, index: Index) -> None:
        if index != self.current:
            self.switches += 1
        self.current = index

    @staticmethod
    def _cost(measured: list[tuple[float, float]]) -> float:
        return sum(s for _, s in measured) / sum(u for u, _ in measured)

    def _beats(self, candidate: list, centre: list) -> bool:
        """Whether the candidate's steps beat the centre's: cheaper by more than `tolerance`
        overall, and cheaper in each half of the paired run (centre-candidate, then
        candidate-centre), so that one slow step (another process's burst) cannot decide."""
        if self._cost(candidate) >= self._cost(centre) * (1 - self.tolerance):
            return False
        before = (self.samples + 1) // 2
        if self.samples - before == 0:  # one step each: no halves
            return True
        return self._cost(candidate[:before]) < self._cost(centre[:before]) and self._cost(
            candidate[before:]
        ) < self._cost(centre[before:])

    def _next_comparison(self) -> None:
        """Compare the centre with its next untried neighbour, or settle."""
        candidates = [n for n in self._neighbours(self.centre) if n not in self._lost]
        if not candidates:
            self._settle()
            return
        self._candidate = candidates[0]
        before = (self.samples + 1) // 2
        # warm-up steps first, so that the paired steps are adjacent in time
        warm = [
            index
            for index in (self.centre, self._candidate)
            for _ in range(self.warmup - self._runs.get(index, 0))
        ]
        self._schedule = warm + (
            [self.centre] * before
            + [self._candidate] * self.samples
            + [self.centre] * (self.samples - before)
        )
        self._measured = {}
        self._switch(self._schedule[0])

    def _compare(self) -> None:
        """The paired run is complete: move to the candidate if it beat the centre."""
        candidate = self._candidate
        assert candidate is not None
        centre, measured = self._measured[self.centre], self._measured[candidate]
        self.tried.append((self._config(candidate), self._cost(measured), self._cost(centre)))
        if self._beats(measured, centre):
            self._direction = tuple(a - b for a, b in zip(candidate, self.centre, strict=True))
            self._lost = {self.centre}
            self.centre = candidate
        else:
            self._lost.add(candidate)
        self._next_comparison()

    def _settle(self) -> None:
        self._switch(self.centre)
        self._schedule = []
        self.state = "settled"
        if self.search_started is not None:
            self.converge_seconds = self.clock() - self.search_started
        self._baseline = None
        for recent in self._recent.values():
            recent.clear()

    # -- drift ----------------------------------------------------------------------------

    def _check_drift(self) -> None:
        """Settled: take the baseline from the first `window` steps, then re-tune when the
        median of the last `window` values of a signal moved by more than `drift` x."""
        if self.state != "settled":
            return
        if self._baseline is None:
            if len(self._recent["cost"]) < self.window:
                return
            self._baseline = {
                name: statistics.median(values)
                for name, values in self._recent.items()
                if len(values) >= self.window
            }
            for recent in self._recent.values():
                recent.clear()
            return
        for name, reference in self._baseline.items():
            recent = self._recent[name]
            if len(recent) < self.window or reference <= 0:
                continue
            ratio = statistics.median(recent) / reference
            if ratio > self.drift or ratio < 1 / self.drift:
                self._retune(f"{_SIGNALS[name]} changed {ratio:.2f}x")
                return

    def _retune(self, reason: str) -> None:
        self.retunes += 1
        self.retune_reason = reason
        self.state = "exploring"
        self.centre = self.current
        self._direction = None
        self._lost = set()
        self.search_started = self.clock()
        self._baseline = None
        for recent in self._recent.values():
            recent.clear()
        self._next_comparison()


_SIGNALS = {"cost": "cost per unit", "units": "work per batch", "rate": "input rate"}


__all__ = ["Knob", "Tuner", "TunerMetrics"]
