"""The GPU kernels of the holistic functions (runtime/gpu/holistic.py, holistic.cu.j2) without a
GPU: every rendered variant compiles with nvcc; the selection kernel, compiled by g++ over the
CUDA shim (tests/cuda_host.py, one lane per warp), equals the CPU kernels on random runs; and
the time-window driver over the GPU kernels' code path (numpy standing in for CuPy) matches
the oracle. On a GPU host the same comparisons run on the device (tests/test_holistic_gpu.py).
"""

from __future__ import annotations

import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest
from cuda_host import HostArray, HostCupy, host_modules
from fuzzer import Scenario, check
from hypothesis import given, settings
from oracle import OracleQuery
from test_holistic import COLUMNS, DDL, SETTINGS, SPECIAL, scenarios

from mangonel.compiler import codegen
from mangonel.runtime.cpu import holistic as cpu_holistic
from mangonel.runtime.cpu.kernels import CpuKernels
from mangonel.runtime.gpu import holistic as gpu_holistic
from mangonel.runtime.gpu.holistic import GpuHolistic
from mangonel.runtime.operators.holistic_evaluate import percentile_values

FORMS = tuple(codegen.HOLISTIC_FORM_LANES)
EVALUATIONS = codegen.HOLISTIC_EVALUATIONS
EXTREMES = np.array([-(2**63), 2**63 - 1, -1, 0, 1], np.int64)


@pytest.fixture(scope="module")
def host_module(tmp_path_factory):
    """A `CompileContext.module` stand-in: g++ over the CUDA shim."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    folder = tmp_path_factory.mktemp("holistic_shim")
    return host_modules(folder)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("evaluation", EVALUATIONS)
def test_every_selection_kernel_variant_compiles_with_nvcc(tmp_path, evaluation, form):
    generated = codegen.render_holistic_kernels(evaluation, form)
    assert generated.names["select"] in nvcc_ptx(tmp_path, generated.source)


def test_the_runs_kernel_compiles_with_nvcc(tmp_path):
    generated = codegen.render_holistic_runs_kernel()
    assert generated.names["runs"] in nvcc_ptx(tmp_path, generated.source)


def nvcc_ptx(folder, source: str) -> str:
    """The PTX nvcc makes of `source` (sm_90); the test skips where nvcc is absent."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH; the kernels were rendered, not compiled")
    path = folder / "module.cu"
    path.write_text(source)
    result = subprocess.run(
        ["nvcc", "--ptx", "-arch=sm_90", "-std=c++17", "-o", str(folder / "m.ptx"), str(path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return (folder / "m.ptx").read_text()


def test_an_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="no holistic kernel"):
        codegen.render_holistic_kernels("mode", "thread-per-window")


def _random_runs(
    rng: np.random.Generator,
    rows: int,
    spread: int,
    extremes: bool,
    most_runs: int = 6,
    lengths: tuple[int, ...] = (0, 1, 1, 2, 5, 12),
):
    """Sorted runs of random values: each row 0-`most_runs` runs of a length drawn from
    `lengths` (by default often empty, often one value; many ties with a small spread); runs
    may be shared between rows."""
    pieces, run_start, run_end, row_first, row_runs = [], [], [], [], []
    total = 0
    for _ in range(rows):
        row_first.append(len(run_start))
        count = int(rng.integers(0, most_runs + 1))
        row_runs.append(count)
        for _ in range(count):
            if run_start and rng.random() < 0.2:  # a run another row reads too
                pick = int(rng.integers(0, len(run_start)))
                run_start.append(run_start[pick])
                run_end.append(run_end[pick])
                continue
            length = int(rng.choice(lengths))
            run = rng.integers(-spread, spread + 1, length).astype(np.int64)
            if extremes and length:
                run[rng.random(length) < 0.3] = rng.choice(EXTREMES)
            pieces.append(np.sort(run))
            run_start.append(total)
            run_end.append(total + length)
            total += length
    values = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
    arrays = [np.array(a, np.int64) for a in (run_start, run_end, row_first, row_runs)]
    return values, tuple(arrays)


def assert_selection_equals_the_cpu(
    gpu: GpuHolistic,
    values: np.ndarray,
    runs: tuple,
    evaluation: str,
    fraction: float | tuple[float, ...],
    context: tuple,
    to_device=lambda array: array,  # noqa: ANN001 - the kernels' array module's copy up
) -> None:
    """The GPU kernels' (n, lower, higher) of the runs equal the CPU kernel's (the higher
    value only for PERCENTILE_CONT: the CPU leaves DISC's and DISTINCT's unused)."""
    want = cpu_holistic.holistic_select(values, *runs, evaluation, fraction, True)
    arrays = [to_device(a) for a in (values, *runs)]
    got = gpu.holistic_select_later(*arrays, evaluation, fraction, True)()
    for name, g, w in zip(("n", "lower", "higher"), got, want, strict=True):
        if evaluation != "percentile_cont" and name == "higher":
            continue
        assert np.array_equal(g, w), (*context, fraction, name)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("evaluation", EVALUATIONS)
def test_the_selection_kernel_equals_the_cpu_kernel(host_module, evaluation, form):
    rng = np.random.default_rng(11)
    gpu = GpuHolistic(HostCupy(), host_module, form)
    for case in range(40):
        most_runs = 300 if case % 5 == 4 else 6  # a block's lanes over several warps
        values, runs = _random_runs(
            rng, int(rng.integers(0, 30)), [1, 3, 1000][case % 3], case % 4 == 0, most_runs
        )
        for fraction in (0.0, 1.0, 0.5, 0.25, 0.999, float(rng.random())):
            assert_selection_equals_the_cpu(
                gpu, values, runs, evaluation, fraction, (evaluation, form, case)
            )


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("floating", [False, True])
def test_the_kernels_interpolation_is_the_hosts_bit_for_bit(host_module, form, floating):
    """PERCENTILE_CONT interpolated by the selection kernel (`floating=`: the firing reads
    n and the value) equals `percentile_values` over the kernel's keys bit for bit: integer
    and floating arguments (every int64 a key, so infinities, NaNs and both zeros among the
    doubles), one p and an ARRAY of p."""
    rng = np.random.default_rng(13)
    gpu = GpuHolistic(HostCupy(), host_module, form)
    value_field = SimpleNamespace(type=SimpleNamespace(is_floating=floating))
    for case in range(30):
        values, runs = _random_runs(
            rng, int(rng.integers(0, 30)), [1, 3, 1000, 2**62][case % 4], case % 3 == 0
        )
        for fraction in (0.5, 0.0, 1.0, float(rng.random()), (0.25, 0.5, 0.9)):
            plan = SimpleNamespace(evaluation="percentile_cont", percentages=fraction)
            keys = gpu.holistic_select_later(values, *runs, "percentile_cont", fraction, True)
            want_n, want = percentile_values(plan, value_field, *keys())
            finished = gpu.holistic_select_later(
                values, *runs, "percentile_cont", fraction, True, floating=floating
            )
            got_n, got = finished()
            assert np.array_equal(got_n, want_n)
            assert got.shape == want.shape and got.dtype == np.float64
            assert np.array_equal(got.view(np.int64), want.view(np.int64)), (case, fraction)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("evaluation", ["percentile_cont", "percentile_disc"])
def test_an_array_of_p_selects_each_p_as_a_single_p_does(
    host_module, monkeypatch, evaluation, form
):
    """A percentile over an ARRAY of p: one launch (GPU) or pass (CPU) gives per row and p
    what the single-p selection gives, in the order of the ps (repeats and descending
    ones included); the GPU's results come back in one device read."""
    reads = _count_reads(monkeypatch)
    rng = np.random.default_rng(12)
    gpu = GpuHolistic(HostCupy(), host_module, form)
    fractions = (0.75, 0.0, 0.5, 1.0, 0.5, float(rng.random()))
    for case in range(25):
        most_runs = 300 if case % 5 == 4 else 6
        values, runs = _random_runs(
            rng, int(rng.integers(0, 30)), [1, 3, 1000][case % 3], case % 4 == 0, most_runs
        )
        launches = gpu.launches
        reads.clear()
        got = gpu.holistic_select_later(values, *runs, evaluation, fractions, True)()
        assert gpu.launches - launches <= 1
        assert len(reads) == 1  # n, lower and higher cross in one copy
        cpu = cpu_holistic.holistic_select(values, *runs, evaluation, fractions, True)
        assert got[1].shape == (len(runs[2]), len(fractions))
        for column, fraction in enumerate(fractions):
            n, lower, higher = cpu_holistic.holistic_select(
                values, *runs, evaluation, fraction, True
            )
            for array in (got, cpu):
                assert np.array_equal(array[0], n)
                assert np.array_equal(array[1][:, column], lower), (form, fraction, case)
                if evaluation == "percentile_cont":
                    assert np.array_equal(array[2][:, column], higher), (form, fraction, case)


def test_a_pane_is_sorted_by_key_then_value_with_offsets(host_module):
    gpu = GpuHolistic(HostCupy(), host_module)
    slots = np.array([2, 0, 2, 0, 2, 3], np.int64)
    keys = np.array([5, 9, -1, 9, 5, 7], np.int64)
    sorted_values, offsets = gpu.sort_pane(slots, keys, 5)
    want_values, want_offsets = cpu_holistic.sort_pane(slots, keys, 5)
    assert np.array_equal(np.asarray(sorted_values), want_values)
    assert np.array_equal(offsets, want_offsets)
    assert offsets.tolist() == [0, 2, 2, 5, 6, 6]
    empty_values, empty_offsets = gpu.sort_pane(slots[:0], keys[:0], 3)
    assert len(empty_values) == 0 and empty_offsets.tolist() == [0, 0, 0, 0]


def window_runs_case(rng: np.random.Generator) -> tuple:
    """`window_runs` arguments of a span of 7 panes (two missing, one sorted before slots 4
    and 5 were seen) read by 30 rows of 3 panes each: (flat offsets, offset_first,
    offset_last, base, slots, first_index, panes_per_row)."""
    n_slots, span, pw, rows = 6, 7, 3, 30
    flat, first, last, lengths = [], [], [], []
    for pane in range(span):
        if pane in (1, 4):  # no values in this pane
            first.append(0)
            last.append(-1)
            lengths.append(0)
            continue
        width = 4 if pane == 5 else n_slots  # sorted when slots 0..3 were the only ones
        counts = rng.integers(0, 4, width)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        first.append(sum(len(f) for f in flat))
        last.append(width)
        lengths.append(int(offsets[-1]))
        flat.append(offsets)
    base = np.cumsum(lengths) - np.array(lengths)
    slots = rng.integers(0, n_slots, rows)
    first_index = rng.integers(0, span - pw + 1, rows)
    return (
        np.concatenate(flat).astype(np.int64),
        np.array(first, np.int64),
        np.array(last, np.int64),
        base.astype(np.int64),
        slots.astype(np.int64),
        first_index.astype(np.int64),
        pw,
    )


class _CountedUploads(HostCupy):
    """HostCupy counting `asarray` of host (numpy, not device) arrays: host-to-device
    copies on CuPy."""

    def __init__(self) -> None:
        self.uploads = 0

    def asarray(self, array, *args, **kwargs):  # noqa: ANN001, ANN201
        if isinstance(array, np.ndarray) and not isinstance(array, HostArray):
            self.uploads += 1
        return np.asarray(array, *args, **kwargs).view(HostArray)


def test_window_runs_equal_the_cpu_runs(host_module):
    xp = _CountedUploads()
    gpu = GpuHolistic(xp, host_module)
    arguments = window_runs_case(np.random.default_rng(3))
    flat = np.asarray(arguments[0]).view(HostArray)  # the panes' offsets live on the device
    got = gpu.window_runs(flat, *arguments[1:])
    assert xp.uploads == 1  # the span's and the rows' host arrays go up in one copy
    want = cpu_holistic.window_runs(*arguments)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(np.asarray(g), w)
    # against the definition, run by run
    flat, first, last, base, slots, first_index, pw = arguments
    run_start, run_end = want[0].reshape(-1, pw), want[1].reshape(-1, pw)
    for r, (slot, start) in enumerate(zip(slots, first_index, strict=True)):
        for i in range(pw):
            pane = start + i
            if last[pane] < 0:
                assert run_start[r, i] == run_end[r, i] == 0
                continue
            offsets = flat[first[pane] : first[pane] + last[pane] + 1]
            low = offsets[min(slot, last[pane])]
            high = offsets[min(slot + 1, last[pane])]
            assert (run_start[r, i], run_end[r, i]) == (base[pane] + low, base[pane] + high)
    assert all(len(a) == 0 for a in gpu.window_runs(*arguments[:4], slots[:0], first_index[:0], pw))


@pytest.fixture(params=FORMS)
def gpu_path_on_the_host(request, host_module, monkeypatch):
    """CPU plans whose holistic step runs the GPU kernels' code (sort, runs, selection)."""
    form = request.param
    monkeypatch.setattr(
        CpuKernels, "holistic_for", lambda self, plan: GpuHolistic(HostCupy(), host_module, form)
    )
    return form


@settings(max_examples=25, **SETTINGS)
@given(scenarios("time"))
def test_time_windows_over_the_gpu_kernels_match_the_oracle(gpu_path_on_the_host, scenario):
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


# -- fixed scenarios: every function, the edge cases named, decisive in one run each ------------

EDGE_AGGREGATES = [
    ("median", "MEDIAN(v)", ["col", "v"]),
    ("percentile_cont:0.0", "PERCENTILE_CONT(0) WITHIN GROUP (ORDER BY v)", ["col", "v"]),
    ("percentile_cont:1.0", "PERCENTILE_CONT(1) WITHIN GROUP (ORDER BY v)", ["col", "v"]),
    ("percentile:0.25", "PERCENTILE(x, 0.25)", ["col", "x"]),
    ("percentile_disc:0.0", "PERCENTILE_DISC(0) WITHIN GROUP (ORDER BY x)", ["col", "x"]),
    ("percentile_disc:1.0", "PERCENTILE_DISC(1) WITHIN GROUP (ORDER BY v)", ["col", "v"]),
    ("percentile_disc:0.333", "PERCENTILE_DISC(0.333) WITHIN GROUP (ORDER BY n)", ["col", "n"]),
    ("count_distinct", "COUNT(DISTINCT v)", ["col", "v"]),
    ("count_distinct", "COUNT(DISTINCT x)", ["col", "x"]),
    ("sum", "SUM(x)", ["col", "x"]),
]
# (size, slide) in microseconds: sliding over 10 panes (a warp per window on the GPU), sliding
# over 3 (a thread per window over several runs), tumbling (one run, read in place), sliding
# over 300 panes (a block per window)
EDGE_WINDOWS = [(40, 4), (12, 4), (10, 10), (300, 1)]


def edge_scenario(size: int, slide: int, seed: int = 5) -> Scenario:
    """Out-of-order batches (delay 6 us) over 4 keys: ties (few distinct values), NULLs,
    NaN/-0.0/infinities, a key with one value per window, late rows dropped; a snapshot and
    restore before the third batch."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(360):
        key = int(rng.integers(0, 3))
        v = None if rng.random() < 0.15 else float(rng.integers(-3, 4)) / 2
        if v is not None and rng.random() < 0.08:
            v = float(rng.choice(SPECIAL))
        x = None if rng.random() < 0.2 else int(rng.integers(-(2**40), 2**40) if i % 7 else 1)
        rows.append({"ts": i + int(rng.integers(0, 12)), "k": key, "x": x, "n": i % 3, "v": v})
    for t in range(0, 400, 25):  # key 3: one value in a window
        rows.append({"ts": t, "k": 3, "x": t, "n": 1, "v": float(t)})
    order = np.argsort([r["ts"] + rng.integers(0, 30) for r in rows], kind="stable")
    rows = [rows[i] for i in order]
    batches = [rows[:90], rows[90:200], rows[200:]]
    outputs = (("k", ["col", "k"]), ("ws", ["bound", "start"])) + tuple(
        (f"a{i}", ["agg", i]) for i in range(len(EDGE_AGGREGATES))
    )
    select = ", ".join(f"{sql} AS a{i}" for i, (_, sql, _) in enumerate(EDGE_AGGREGATES))
    window = f"RANGE {size} MICROSECONDS SLIDE {slide} MICROSECONDS"
    oracle = OracleQuery(
        columns=dict(COLUMNS),
        event_time="ts",
        kind="time",
        size=size,
        slide=slide,
        delay=6,
        keys=("k",),
        aggregates=tuple((name, argument) for name, _, argument in EDGE_AGGREGATES),
        having=None,
        outputs=outputs,
    )
    query = f"SELECT k, window_start AS ws, {select} FROM s [{window}] GROUP BY k"
    return Scenario(DDL.format(delay=6), query, oracle, batches, (2,))


@pytest.mark.parametrize(("size", "slide"), EDGE_WINDOWS)
def test_edge_cases_over_the_gpu_kernels_match_the_oracle(gpu_path_on_the_host, size, slide):
    failure = check(edge_scenario(size, slide), "cpu")
    assert failure is None, str(failure)


# -- the values lift and the pane split of the GPU path --------------------------------------


def _values_lift(argument_type: str):
    """The holistic step's lift of raw values (as `HolisticTimeWindows` makes it) of
    `SELECT k, MEDIAN(v) ... WHERE v <> 3` over a `v` of `argument_type`."""
    import dataclasses

    import mangonel
    from mangonel.compiler import physical as ph

    session = mangonel.Session(backend="cpu")
    session.execute(
        f"CREATE STREAM s (ts TIMESTAMP, k BIGINT, v {argument_type}) WITH (event_time = 'ts')"
    )
    plan = session.sql(
        "SELECT k, MEDIAN(v) AS m FROM s [RANGE 1 SECOND SLIDE 10 MILLISECONDS] "
        "WHERE v <> 3 GROUP BY k"
    ).plan
    window = ph.find(plan, ph.WindowAggregateExec)
    fields = tuple(f for f in window.fields if f.kind.holistic)
    return dataclasses.replace(window.lift, fields=fields)


@pytest.mark.parametrize("argument_type", ["DOUBLE", "FLOAT", "INT", "BIGINT"])
def test_the_values_lift_compiles_with_nvcc(tmp_path, argument_type):
    generated = codegen.render_lift_kernels(_values_lift(argument_type))
    assert set(generated.names) == {"lift"}
    assert generated.names["lift"] in nvcc_ptx(tmp_path, generated.source)


def test_the_values_lift_gives_the_cpu_order_keys(host_module):
    """The CUDA lift (run on the host through the shim) gives `order_keys`' keys: -0.0 as
    0.0, every NaN one key above +inf, negative doubles below positive ones; NULLs and the
    rows WHERE drops are not valid."""
    from mangonel.aggregates.holistic import order_keys

    lift = _values_lift("DOUBLE")
    generated = codegen.render_lift_kernels(lift)
    function = host_module(generated).get_function(generated.names["lift"])
    values = np.array(
        [1.5, -0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, -2.5, 3.0, 7.0, 5e-324], np.float64
    )
    rows = len(values)
    valid = np.ones(rows, np.uint8)
    valid[9] = 0  # v NULL
    ts = np.arange(rows, dtype=np.int64)
    keys = np.zeros(rows, np.int64)
    event_time = np.empty(rows, np.int64)
    has_time = np.empty(rows, np.uint8)
    contributes = np.empty(rows, np.uint8)
    parts = [np.empty(rows, np.int64) for _ in generated.parts]
    words = np.full(2 * rows, -7, np.int64)
    by_name = {"ts": (ts, None), "k": (keys, None), "v": (values, valid)}
    columns = []
    for column in generated.columns:
        values_of, valid_of = by_name[column.name]
        # an offset column's chunk travels wide here (8-byte values, base 0)
        wide = (np.int64(0), np.int32(1)) if column.offset else ()
        columns += [values_of, *wide, valid_of]
    function(
        (1,),
        (1,),
        (
            *columns,
            event_time,
            has_time,
            contributes,
            *parts,
            words,
            np.int64(rows),
            np.zeros(1, np.int32),
            rows,
        ),
    )
    value_part, valid_part = parts
    ok = (valid != 0) & (values != 3.0)
    assert valid_part.tolist() == ok.astype(np.int64).tolist()
    want = order_keys(values)
    assert np.array_equal(value_part[ok], want[ok])
    assert value_part[1] == value_part[2]  # -0.0 reads as 0.0
    assert value_part[3] == value_part[4] > value_part[5]  # one NaN, above +inf


def test_the_values_lift_writes_the_key_words_the_host_key_map_encodes(host_module):
    """The values lift's key words (`lift_tuples(key_words=True)`: the holistic key map maps
    them on the device) equal `GpuKeyMap.encode`'s host words, NULL keys and a chunk that
    starts inside the batch (word w of row i at w * stride + i) included."""
    import dataclasses
    from types import SimpleNamespace

    import pyarrow as pa

    import mangonel
    from mangonel.catalog.types import SqlType
    from mangonel.compiler import physical as ph
    from mangonel.runtime.gpu.keys import GpuKeyMap

    session = mangonel.Session(backend="cpu")
    session.execute(
        "CREATE STREAM s (ts TIMESTAMP, k BIGINT, j INT, v DOUBLE) WITH (event_time = 'ts')"
    )
    plan = session.sql(
        "SELECT k, j, MEDIAN(v) AS m FROM s [RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k, j"
    ).plan
    window = ph.find(plan, ph.WindowAggregateExec)
    lift = dataclasses.replace(
        window.lift, fields=tuple(f for f in window.fields if f.kind.holistic)
    )
    generated = codegen.render_lift_kernels(lift)
    assert generated.key_words == 3
    function = host_module(generated).get_function(generated.names["lift"])
    rng = np.random.default_rng(3)
    rows = 40
    k = rng.integers(-(2**40), 2**40, rows)
    k_valid = rng.random(rows) < 0.7
    j = rng.integers(-5, 5, rows).astype(np.int32)
    j_valid = rng.random(rows) < 0.7
    by_name = {
        "ts": (np.arange(rows, dtype=np.int64), None),
        "k": (k, k_valid.astype(np.uint8)),
        "j": (j, j_valid.astype(np.uint8)),
        "v": (rng.random(rows), None),
    }
    words = np.full(3 * rows, -7, np.int64)
    for first, end in ((0, 15), (15, rows)):  # two chunks, as `lift_tuples` launches them
        columns = []
        for column in generated.columns:
            values_of, valid_of = by_name[column.name]
            wide = (np.int64(0), np.int32(1)) if column.offset else ()
            valid_part = None if valid_of is None else np.ascontiguousarray(valid_of[first:end])
            columns += [np.ascontiguousarray(values_of[first:end]), *wide, valid_part]
        n = end - first
        outputs = [np.empty(n, np.int64), np.empty(n, np.uint8), np.empty(n, np.uint8)]
        parts = [np.empty(n, np.int64) for _ in generated.parts]
        function(
            (1,),
            (1,),
            (
                *columns,
                *outputs,
                *parts,
                words[first:],
                np.int64(rows),
                np.zeros(1, np.int32),
                np.int64(n),
            ),
        )
    host = SimpleNamespace(words=3, types=(SqlType.BIGINT, SqlType.INT), dictionaries=[None, None])
    arrow = [pa.array(k, mask=~k_valid), pa.array(j, mask=~j_valid)]
    want = GpuKeyMap.encode(host, arrow)
    assert np.array_equal(words.reshape(3, rows), want)


def test_the_gpu_pane_split_groups_as_the_cpu_split_and_sorts_each_pane(host_module):
    rng = np.random.default_rng(11)
    rows = 500
    panes = rng.integers(-3, 4, rows).astype(np.int64)
    slots = rng.integers(0, 7, rows).astype(np.int32)
    values = rng.integers(-50, 50, rows).astype(np.int64)
    keep = rng.random(rows) < 0.8
    gpu = GpuHolistic(HostCupy(), host_module)
    got_panes, got_chunks, presorted = gpu.split_panes(panes, slots, values, keep)
    want_panes, want_chunks, cpu_presorted = cpu_holistic.split_panes(panes, slots, values, keep)
    assert presorted and not cpu_presorted
    assert got_panes == want_panes == sorted(set(panes[keep].tolist()))
    for got, want in zip(got_chunks, want_chunks, strict=True):
        (g_slots, g_values, g_times), (w_slots, w_values, w_times) = got, want
        assert g_times is None and w_times is None  # no Python function reads the times
        g_slots, g_values = np.asarray(g_slots), np.asarray(g_values)
        order = np.lexsort((w_values, w_slots))
        assert np.array_equal(g_slots, w_slots[order].astype(np.int64))
        assert np.array_equal(g_values, w_values[order])
        # a presorted chunk's offsets equal a full sort's
        sorted_values, offsets = gpu.sort_pane(g_slots, g_values, 7, presorted=True)
        want_values, want_offsets = cpu_holistic.sort_pane(w_slots, w_values, 7)
        assert np.array_equal(np.asarray(sorted_values), want_values)
        assert np.array_equal(offsets, want_offsets)
    assert gpu.split_panes(panes, slots, values, np.zeros(rows, bool)) == ([], [], True)
    # with event times (a Python function `with_timestamps`): sorted by (slot, value, time)
    times = rng.integers(0, 1000, rows).astype(np.int64)
    _, timed_chunks, _ = gpu.split_panes(panes, slots, values, keep, times)
    _, cpu_timed, _ = cpu_holistic.split_panes(panes, slots, values, keep, times)
    for (_, g_values, g_times), (w_slots, w_values, w_times) in zip(
        timed_chunks, cpu_timed, strict=True
    ):
        order = np.lexsort((w_times, w_values, w_slots))
        assert np.array_equal(np.asarray(g_times), w_times[order])
        assert np.array_equal(np.asarray(g_values), w_values[order])


def _count_reads(monkeypatch) -> list:
    """A list that grows by one for each device-to-host read of the GPU holistic kernels
    (`gpu.holistic._host`: on the device, each is a wait for it)."""
    reads: list = []
    original = gpu_holistic._host
    monkeypatch.setattr(gpu_holistic, "_host", lambda a: reads.append(1) or original(a))
    return reads


def _count_calls(monkeypatch, method: str) -> list[int]:
    """A list that gets an entry at each call of `GpuHolistic.<method>`."""
    calls: list[int] = []
    original = getattr(gpu_holistic.GpuHolistic, method)
    monkeypatch.setattr(
        gpu_holistic.GpuHolistic,
        method,
        lambda self, *a: calls.append(1) or original(self, *a),
    )
    return calls


def _chunks_equal(got, want) -> bool:
    return len(got) == len(want) and all(
        all(
            (g is None and w is None) or np.array_equal(np.asarray(g), np.asarray(w))
            for g, w in zip(got_chunk, want_chunk, strict=True)
        )
        for got_chunk, want_chunk in zip(got, want, strict=True)
    )


@pytest.mark.parametrize("by_value", [True, False])
@pytest.mark.parametrize("timed", [False, True])
def test_the_pane_split_over_a_known_range_reads_the_device_once(
    host_module, monkeypatch, by_value, timed
):
    """With the batch's pane range known on the host, the split gives the general path's
    panes and chunks from one device read (the general path reads the kept rows' cuts and
    their pane ids: two, besides the count its compaction syncs on); a range that misses a
    kept row's pane is caught by the same read and the general path answers."""
    reads = _count_reads(monkeypatch)
    rng = np.random.default_rng(17)
    rows = 700
    panes = rng.integers(-4, 9, rows).astype(np.int64)
    panes[rng.random(rows) < 0.1] = 100  # rows outside the range, none of them kept
    slots = rng.integers(0, 9, rows).astype(np.int32)
    values = rng.integers(-20, 20, rows).astype(np.int64)
    times = rng.integers(0, 50, rows).astype(np.int64) if timed else None
    keep = (rng.random(rows) < 0.7) & (panes < 100)
    keep[panes == 2] = False  # a pane of the range with no kept row
    gpu = GpuHolistic(HostCupy(), host_module)
    arguments = (panes, slots, values, keep, times, by_value)
    want = gpu.split_panes(*arguments)
    reads.clear()
    got = gpu.split_panes(*arguments, pane_range=(-4, 8))
    assert len(reads) == 1
    assert got[0] == want[0] == sorted(set(panes[keep].tolist())) and 2 not in got[0]
    assert got[2] and _chunks_equal(got[1], want[1])
    # a wrong range (a kept row's pane past it, or before it): the general path's answer
    for wrong in ((-4, 7), (-3, 8)):
        found = gpu.split_panes(*arguments, pane_range=wrong)
        assert found[0] == want[0] and _chunks_equal(found[1], want[1])
    nothing = np.zeros(rows, bool)
    assert gpu.split_panes(panes, slots, values, nothing, pane_range=(-4, 8)) == ([], [], True)
    assert gpu.split_panes(panes[:0], slots[:0], values[:0], keep[:0], pane_range=(0, 0)) == (
        [],
        [],
        True,
    )


def test_the_in_range_split_finds_each_chunks_offsets_in_one_search(host_module, monkeypatch):
    """Given the known slots, the in-range split finds every chunk's per-slot offsets in the
    search that bounds its (pane, slot) groups (no second search: `_pane_offsets` is not
    called), and `sort_pane(presorted=True)` of that chunk returns them without searching:
    equal to the counting sort's, cut at the slots known at the split (a slot met later
    reads the pane's end: no value). Another array with the same values is searched."""
    rng = np.random.default_rng(23)
    rows = 900
    panes = rng.integers(3, 9, rows).astype(np.int64)
    slots = rng.integers(0, 6, rows).astype(np.int32)
    slots[panes == 5] = rng.integers(0, 2, int((panes == 5).sum()))  # slots 2.. empty there
    values = rng.integers(-30, 30, rows).astype(np.int64)
    keep = rng.random(rows) < 0.8
    gpu = GpuHolistic(HostCupy(), host_module)
    searches = _count_calls(monkeypatch, "_pane_offsets")
    grouped = _count_calls(monkeypatch, "_split_in_groups")
    pane_ids, chunks, _ = gpu.split_panes(panes, slots, values, keep, pane_range=(3, 8), n_slots=6)
    assert len(grouped) == 1 and not searches and len(gpu._split_offsets) == len(chunks) == 6
    sort_calls = []
    with monkeypatch.context() as patched:
        patched.setattr(gpu_holistic, "lexsort_order", lambda *a: sort_calls.append(1))
        for pane, (chunk_slots, chunk_values, _) in zip(pane_ids, chunks, strict=True):
            in_pane = keep & (panes == pane)
            want_values, want_offsets = cpu_holistic.sort_pane(slots[in_pane], values[in_pane], 8)
            got_values, got_offsets = gpu.sort_pane(chunk_slots, chunk_values, 8, presorted=True)
            assert got_values is chunk_values and len(got_offsets) == 7
            assert np.array_equal(np.asarray(got_values), want_values)
            assert np.array_equal(np.asarray(got_offsets), want_offsets[:7])
            # asked again (a copy, or the pane sorted anew): searched, the same answer
            _, again_offsets = gpu.sort_pane(chunk_slots, chunk_values.copy(), 8, presorted=True)
            assert np.array_equal(np.asarray(again_offsets), want_offsets)
    assert not sort_calls and not gpu._split_offsets  # each entry given once, then dropped
    # without the slots (or by slot only): no search, nothing kept
    gpu.split_panes(panes, slots, values, keep, pane_range=(3, 8))
    gpu.split_panes(panes, slots, values, keep, by_value=False, pane_range=(3, 8), n_slots=6)
    assert len(grouped) == 1 and not searches and not gpu._split_offsets


@pytest.mark.parametrize("largest_group", [1024, 3])
def test_the_grouped_split_equals_the_sorted_split(host_module, monkeypatch, largest_group):
    """The in-range split by (pane, slot) groups, each sorted by a block (`sort_groups`),
    gives the panes and chunks of the split that sorts the values by radix: rows of several
    panes, not-kept rows whose slot is -1 (a row the fused pass did not merge), empty
    groups, groups of one value and of more than a warp, equal values. A group larger than a
    block sorts (`largest_group` 3) takes the radix sort of the values; a kept row outside
    the range, the general path."""
    monkeypatch.setattr(gpu_holistic.codegen, "GROUP_SORT_VALUES", largest_group)
    rng = np.random.default_rng(31)
    rows = 1500
    panes = rng.integers(10, 16, rows).astype(np.int64)
    slots = rng.integers(0, 7, rows).astype(np.int32)
    slots[:400] = 2  # one (pane, slot) group of ~70 values
    values = rng.integers(-50, 50, rows).astype(np.int64)
    keep = rng.random(rows) < 0.85
    slots[~keep] = -1
    gpu = GpuHolistic(HostCupy(), host_module)
    general = gpu.split_panes(panes, slots, values, keep)
    grouped = gpu.split_panes(panes, slots, values, keep, pane_range=(10, 15), n_slots=7)
    assert grouped[0] == general[0] and grouped[2]
    assert _chunks_equal(grouped[1], general[1])
    kept_outside = keep.copy()
    kept_outside[np.flatnonzero(panes == 15)[0]] = True
    wrong = gpu.split_panes(panes, slots, values, kept_outside, pane_range=(10, 14), n_slots=7)
    want = gpu.split_panes(panes, slots, values, kept_outside)
    assert wrong[0] == want[0] and _chunks_equal(wrong[1], want[1])
    beyond = slots.copy()
    beyond[np.flatnonzero(keep)[0]] = 7  # a kept row's slot past n_slots: the general path
    found = gpu.split_panes(panes, beyond, values, keep, pane_range=(10, 15), n_slots=7)
    want = gpu.split_panes(panes, beyond, values, keep)
    assert found[0] == want[0] and _chunks_equal(found[1], want[1])


def test_a_split_chunks_offsets_go_with_the_chunk(host_module):
    rng = np.random.default_rng(29)
    panes = rng.integers(0, 3, 300).astype(np.int64)
    slots = rng.integers(0, 4, 300).astype(np.int32)
    values = rng.integers(0, 9, 300).astype(np.int64)
    gpu = GpuHolistic(HostCupy(), host_module)
    found = gpu.split_panes(panes, slots, values, np.ones(300, bool), pane_range=(0, 2), n_slots=4)
    assert len(gpu._split_offsets) == 3
    del found
    assert not gpu._split_offsets  # the chunks died: their entries with them


@pytest.mark.parametrize("timed", [False, True])
def test_a_batch_in_one_pane_is_kept_unsorted_from_one_read(host_module, monkeypatch, timed):
    """A batch whose rows lie in one pane (a pane longer than a batch: it gets several
    chunks, sorted together when a window reads it) is one chunk of its kept rows in arrival
    order, not sorted, after one device read; its pane sort equals the CPU's. A wrong hint
    (a kept row in another pane) is caught by that read and the general path answers."""
    reads = _count_reads(monkeypatch)
    rng = np.random.default_rng(31)
    rows = 400
    panes = np.full(rows, 6, np.int64)
    slots = rng.integers(0, 5, rows).astype(np.int32)
    values = rng.integers(-40, 40, rows).astype(np.int64)
    times = rng.integers(0, 50, rows).astype(np.int64) if timed else None
    gpu = GpuHolistic(HostCupy(), host_module)
    for keep in (np.ones(rows, bool), rng.random(rows) < 0.7):
        reads.clear()
        pane_ids, chunks, presorted = gpu.split_panes(
            panes, slots, values, keep, times, pane_range=(6, 6), n_slots=5
        )
        assert pane_ids == [6] and not presorted and len(chunks) == 1
        assert len(reads) == 1  # (a compaction also syncs on its count, inside CuPy)
        chunk_slots, chunk_values, chunk_times = (
            None if a is None else np.asarray(a) for a in chunks[0]
        )
        assert np.array_equal(chunk_slots, slots[keep].astype(np.int64))
        assert np.array_equal(chunk_values, values[keep])
        assert (chunk_times is None) == (not timed)
        if timed:
            assert np.array_equal(chunk_times, times[keep])
        got_values, got_offsets = gpu.sort_pane(chunk_slots, chunk_values, 5)
        want_values, want_offsets = cpu_holistic.sort_pane(slots[keep], values[keep], 5)
        assert np.array_equal(np.asarray(got_values), want_values)
        assert np.array_equal(np.asarray(got_offsets), want_offsets)
    keep = np.ones(rows, bool)
    assert gpu.split_panes(panes, slots, values, ~keep, pane_range=(6, 6)) == ([], [], True)
    moved = panes.copy()
    moved[::7] = 7  # the hint misses these kept rows: the general path, sorted
    want = gpu.split_panes(moved, slots, values, keep, times)
    got = gpu.split_panes(moved, slots, values, keep, times, pane_range=(6, 6))
    assert got[0] == want[0] == [6, 7] and got[2] and _chunks_equal(got[1], want[1])
    # a field only sketches read (by slot): the in-range split, sorted by slot
    assert gpu.split_panes(panes, slots, values, keep, by_value=False, pane_range=(6, 6))[2]
