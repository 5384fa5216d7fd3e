"""The oracle's window kinds (tests/oracle.py): for each kind, which tuples are late, which
windows a tuple belongs to, and which windows fire at a watermark. Each kind keeps its own
tuples (plain lists per window or per key) and hands fired windows to `Oracle` as entries
(order, key, window start, window end, argument tuples, their event times); `Oracle` sorts
them by order and computes the aggregates. `key_order[key]` numbers keys in the order they
first contributed a tuple (rows of one window are ordered by it). Imports nothing from
mangonel (tests/test_fuzz.py checks).
"""

from __future__ import annotations

from collections import defaultdict

# a fired window: (order, key, start, end, argument tuples, their event times)
Fired = tuple


class TimeWindows:
    """RANGE size SLIDE slide: window k is [k * slide, k * slide + size); the tuple is in every
    window holding its ts that has not fired, late when its last window ended at or before W."""

    def __init__(self, size: int, slide: int) -> None:
        self.size, self.slide = size, slide
        # ((start, end), key) -> list of (event time, arguments)
        self.contents: dict[tuple, list] = defaultdict(list)

    def late(self, ts: int, watermark: int | None) -> str | None:
        if watermark is not None and (ts // self.slide) * self.slide + self.size <= watermark:
            return "window closed"  # its last window ended at or before W
        return None

    def add(self, ts: int, key: tuple, args: tuple, watermark: int | None) -> None:
        size, slide = self.size, self.slide
        for k in range((ts - size) // slide + 1, ts // slide + 1):
            if watermark is None or k * slide + size > watermark:
                self.contents[((k * slide, k * slide + size), key)].append((ts, args))

    def fire(self, watermark: int | None, final: bool, key_order: dict) -> list[Fired]:
        """Every window ending at or before W (all: `final`); ordered by end (one window ends
        at each time), then key order."""
        fired = []
        for ((start, end), key), tuples in list(self.contents.items()):
            if final or (watermark is not None and end <= watermark):
                times = [ts for ts, _ in tuples]
                arguments = [args for _, args in tuples]
                fired.append(((end, key_order[key]), key, start, end, arguments, times))
                del self.contents[((start, end), key)]
        return fired


class CumulateWindows(TimeWindows):
    """CUMULATE (Flink): period p = floor(ts / max) holds [p*max, p*max + j*step), j = 1 ..
    max/step; the tuple is in those ending after it, late when the whole period has fired.
    `size` is the max size, `slide` the step."""

    def late(self, ts: int, watermark: int | None) -> str | None:
        period_start = (ts // self.size) * self.size
        if watermark is not None and period_start + self.size <= watermark:
            return "window closed"  # its period's last window ended at or before W
        return None

    def add(self, ts: int, key: tuple, args: tuple, watermark: int | None) -> None:
        size, step = self.size, self.slide
        period_start = (ts // size) * size
        for j in range(1, size // step + 1):
            end = period_start + j * step
            if end > ts and (watermark is None or end > watermark):
                self.contents[((period_start, end), key)].append((ts, args))


class CountWindows:
    """ROWS size SLIDE slide per key, over the key's tuples in event-time order (ties in
    arrival order); a tuple is final once ts < W and late when it arrives behind W; window j
    holds final tuples [j * slide, j * slide + size) and spans [first ts, last ts + 1)."""

    def __init__(self, size: int, slide: int) -> None:
        self.size, self.slide = size, slide
        # key -> tuples not final yet / final tuples in order, as (ts, arrival, arguments)
        self.pending: dict[tuple, list] = defaultdict(list)
        self.final: dict[tuple, list] = defaultdict(list)
        self.next_window: dict[tuple, int] = defaultdict(int)
        self.arrivals = 0

    def late(self, ts: int, watermark: int | None) -> str | None:
        if watermark is not None and ts < watermark:
            return "behind watermark"  # the key's order up to W is final
        return None

    def add(self, ts: int, key: tuple, args: tuple, watermark: int | None) -> None:
        self.pending[key].append((ts, self.arrivals, args))
        self.arrivals += 1

    def fire(self, watermark: int | None, final: bool, key_order: dict) -> list[Fired]:
        """Every full window of final tuples; ordered by window number, then key order."""
        n, m = self.size, self.slide
        fired = []
        for key in list(self.pending):
            becoming, staying = [], []
            for t in self.pending[key]:
                is_final = final or (watermark is not None and t[0] < watermark)
                (becoming if is_final else staying).append(t)
            self.pending[key] = staying
            # tuples become final in ts order; ties keep arrival order
            self.final[key].extend(sorted(becoming, key=lambda t: (t[0], t[1])))
            while self.next_window[key] * m + n <= len(self.final[key]):
                j = self.next_window[key]
                window = self.final[key][j * m : j * m + n]
                start, end = window[0][0], window[-1][0] + 1
                arguments, times = [t[2] for t in window], [t[0] for t in window]
                fired.append(((j, key_order[key]), key, start, end, arguments, times))
                self.next_window[key] += 1
        return fired


class SessionWindows:
    """SESSION GAP g: each key's accepted tuples are regrouped from scratch at every firing:
    sorted by ts, a tuple joins the session before it when its ts is at or before that
    session's last ts + gap (touching intervals merge, as in Spark); a session fires when
    last ts + gap <= W (its tuples are then forgotten);
    a tuple with ts + gap <= W on arrival is late."""

    def __init__(self, gap: int) -> None:
        self.gap = gap
        # key -> (ts, arguments) of tuples whose session has not fired
        self.tuples: dict[tuple, list] = defaultdict(list)

    def late(self, ts: int, watermark: int | None) -> str | None:
        if watermark is not None and ts + self.gap <= watermark:
            return "window closed"  # its own session [ts, ts + gap) ended at or before W
        return None

    def add(self, ts: int, key: tuple, args: tuple, watermark: int | None) -> None:
        self.tuples[key].append((ts, args))

    def fire(self, watermark: int | None, final: bool, key_order: dict) -> list[Fired]:
        """Every session ending at or before W; ordered by start, then key order."""
        gap = self.gap
        fired = []
        for key in list(self.tuples):
            sessions: list[list] = []
            for ts, args in sorted(self.tuples[key], key=lambda t: t[0]):
                if sessions and ts <= sessions[-1][-1][0] + gap:
                    sessions[-1].append((ts, args))
                else:
                    sessions.append([(ts, args)])
            staying = []
            for session in sessions:
                start, end = session[0][0], session[-1][0] + gap
                if final or (watermark is not None and end <= watermark):
                    order = (start, key_order[key])
                    times = [t[0] for t in session]
                    fired.append((order, key, start, end, [t[1] for t in session], times))
                else:
                    staying.extend(session)
            self.tuples[key] = staying
        return fired


def window_kind(kind: str, size: int, slide: int) -> TimeWindows | CountWindows | SessionWindows:
    """The window kind of an `OracleQuery` ("time", "cumulate", "count", "session")."""
    if kind == "time":
        return TimeWindows(size, slide)
    if kind == "cumulate":
        return CumulateWindows(size, slide)
    if kind == "session":
        return SessionWindows(size)
    if kind == "count":
        return CountWindows(size, slide)
    raise ValueError(f"oracle: unknown window kind {kind!r}")
