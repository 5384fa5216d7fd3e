"""An online auto-tuner: picks a configuration from a finite, ordered space of knobs by the
measured cost per unit of work while the query runs, never stopping the stream.

The operator times its tuned step (`time.perf_counter` around it; on the GPU the step ends
with the device-to-host copy of its results, a sync) and reports `observe(units, seconds)`
once per step, `units` being the work done (values read by the firing's windows). Between
two steps it reads `config` and runs the next step with it: a configuration applies to whole
steps, and the tuned knobs change how results are computed, never what they are.

The search (GASSER, ../shared/papers/gasser-autotuned-gpu-sliding-window.txt, calibrates
offline-style for tens of seconds over a low-discrepancy sample and an interpolated model;
here the space is small and ordered, so a measured hill-climb suffices):

- a configuration is measured over `samples` steps (after `warmup` steps discarded: a new
  GPU form compiles its kernel on first use) and costs their summed seconds over their summed
  units (a ratio estimator: big steps weigh more than small ones);
- from the start configuration (the plan's), the neighbours (one knob one value up or down)
  are measured one at a time, the direction of the last move first; the first that beats the
  centre by more than `tolerance` becomes the centre (first-improvement hill-climbing: a
  move along a slope costs one measurement); when every neighbour of the centre is measured
  and none beats it, the tuner settles on it;
- settled, it keeps watching: over the first `window` steps it takes a baseline (median cost
  per unit, units per step, input rate), then compares the median of the last `window` steps
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
    tried: every configuration measured, in order, with its cost (seconds per unit of work),
        over every search (a re-tune measures anew).
    converge_seconds: wall seconds from the first step of the latest search to its settling
        (None while it explores).
    retunes: searches restarted by a drift; retune_reason: the latest one's cause.
    steps: steps observed; switches: configuration changes applied between steps.
    """

    state: str
    config: dict[str, Any]
    tried: tuple[tuple[dict[str, Any], float], ...] = ()
    converge_seconds: float | None = None
    retunes: int = 0
    retune_reason: str | None = None
    steps: int = 0
    switches: int = 0

    def describe(self) -> str:
        """One line: `tuner: settled config={...} tried=5 converged in 1.23 s retunes=0`."""
        config = " ".join(f"{k}={v}" for k, v in self.config.items())
        parts = [f"tuner: {self.state}", f"config=[{config}]"]
        if self.state in ("exploring", "settled"):
            parts.append(f"tried={len(self.tried)}")
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
            "  tried " + " ".join(f"{k}={v}" for k, v in config.items()) + f": {cost:.3e} s/unit"
            for config, cost in self.tried
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
        samples: int = 3,
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
        self.costs: dict[Index, float] = {}  # this search's measured costs
        self.tried: list[tuple[dict[str, Any], float]] = []
        self._measured: list[tuple[float, float]] = []  # (units, seconds) of `current`
        self._direction: Index | None = None  # the last move, as index differences
        self._skip = warmup
        self.search_started: float | None = None
        self.converge_seconds: float | None = None
        self.retunes = 0
        self.retune_reason: str | None = None
        self.steps = 0
        self.switches = 0
        # settled: the baseline (cost per unit, units per step, input rate) and recent values
        self._baseline: dict[str, float] | None = None
        self._recent: dict[str, deque[float]] = {
            name: deque(maxlen=window) for name in ("cost", "units", "rate")
        }
        self._last_input: float | None = None

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

    def observe(self, units: float, seconds: float) -> None:
        """One step ran with `config`: `units` of work (> 0) in `seconds`."""
        if units <= 0:
            return
        self.steps += 1
        if self.search_started is None:
            self.search_started = self.clock()
        if self.state == "settled":
            self._recent["cost"].append(seconds / units)
            self._recent["units"].append(units)
            self._check_drift()
            return
        if self._skip > 0:
            self._skip -= 1
            return
        self._measured.append((units, seconds))
        if len(self._measured) < self.samples:
            return
        total_units = sum(u for u, _ in self._measured)
        cost = sum(s for _, s in self._measured) / total_units
        self.costs[self.current] = cost
        self.tried.append((self.config, cost))
        self._advance()

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
            self._skip = self.warmup
        self.current = index
        self._measured = []

    def _advance(self) -> None:
        """Move to the configuration just measured if it beats the centre; then measure the
        centre's next unmeasured neighbour, or settle."""
        if self.centre not in self.costs:
            self._switch(self.centre)
            return
        just = self.current
        if just != self.centre and self.costs[just] < self.costs[self.centre] * (
            1 - self.tolerance
        ):
            self._direction = tuple(a - b for a, b in zip(just, self.centre, strict=True))
            self.centre = just
        unmeasured = [n for n in self._neighbours(self.centre) if n not in self.costs]
        if unmeasured:
            self._switch(unmeasured[0])
            return
        self._settle()

    def _settle(self) -> None:
        self._switch(self.centre)
        self._skip = 0  # the centre ran before: nothing to compile or warm
        self.state = "settled"
        assert self.search_started is not None
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
        self.costs = {}
        self.centre = self.current
        self._direction = None
        self._measured = []
        self._skip = 0
        self.search_started = self.clock()
        self.converge_seconds = None
        self._baseline = None
        for recent in self._recent.values():
            recent.clear()


_SIGNALS = {"cost": "cost per unit", "units": "work per step", "rate": "input rate"}


__all__ = ["Knob", "Tuner", "TunerMetrics"]
