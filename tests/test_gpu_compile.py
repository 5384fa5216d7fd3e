"""GPU tuning options and the compile context's caches, without a GPU (the build is faked)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest

from mangonel.compiler import codegen
from mangonel.compiler.options import GpuOptions
from mangonel.runtime.gpu import compile as gpu_compile
from mangonel.runtime.gpu.compile import CompileContext


def test_default_options_are_the_tuned_values_and_print_on_one_line():
    options = GpuOptions()
    assert (options.threads, options.chunk_rows, options.tree_span, options.tree_threads) == (
        256,
        1 << 20,
        8,
        128,
    )
    assert (options.block_table, options.block_table_load) == ("auto", 0.5)
    assert options.describe() == (
        "threads=256 chunk_rows=1048576 staging_threads=0 copy_worker=True tree_span=8 "
        "tree_threads=128 "
        "block_table=auto block_table_load=0.5 module_cache_size=64"
    )
    assert GpuOptions.with_tree_span(5).tree_threads == 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.threads = 128  # type: ignore[misc]


@pytest.mark.parametrize(
    "bad",
    [
        {"threads": 100},
        {"threads": 2048},
        {"chunk_rows": 0},
        {"staging_threads": -1},
        {"tree_span": 0},
        {"tree_threads": 0},
        {"block_table": "sometimes"},
        {"module_cache_size": 0},
    ],
)
def test_options_out_of_range_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        GpuOptions(**bad)


@pytest.fixture
def built(monkeypatch):
    """Compiles counted by source hash instead of run (no GPU, no nvcc needed)."""
    calls: list[str] = []

    def fake_build(generated):
        calls.append(generated.digest)
        return ("module", generated.digest)

    monkeypatch.setattr(gpu_compile, "_build", fake_build)
    return calls


def test_modules_are_cached_by_source_hash(built):
    context = CompileContext(capacity=4)
    first = codegen.render_key_kernels(2)
    again = codegen.render_key_kernels(2)  # another object, the same source
    assert first is not again and first.digest == again.digest
    assert context.module(first) is context.module(again)
    assert built == [first.digest] and context.compiles == 1


def test_the_cache_is_bounded_least_recently_used_first(built):
    context = CompileContext(capacity=2)
    sources = [codegen.render_key_kernels(words) for words in (1, 2, 3)]
    context.module(sources[0])
    context.module(sources[1])
    context.module(sources[0])  # used again: sources[1] is now the oldest
    context.module(sources[2])  # evicts sources[1]
    context.module(sources[0])
    assert built == [sources[0].digest, sources[1].digest, sources[2].digest]
    context.module(sources[1])
    assert built[-1] == sources[1].digest and context.compiles == 4


def test_one_shared_context_per_cache_size():
    assert gpu_compile.shared_context() is gpu_compile.shared_context(64)
    assert gpu_compile.shared_context(8).capacity == 8
    assert gpu_compile.shared_context(8) is not gpu_compile.shared_context()


def test_plan_keyed_kernels_render_once_per_key(built):
    context = CompileContext(capacity=8)
    generated, module = context.key_module(3)
    assert generated.key_words == 3 and module == ("module", generated.digest)
    assert context.key_module(3)[0] is generated
    assert context.key_module(4)[0].key_words == 4
    assert context.compiles == 2


def test_every_module_is_built_without_contraction_and_says_so_in_its_source(monkeypatch):
    """nvcc (and NVRTC) get codegen.COMPILE_OPTIONS for every module, and every module's
    source names them in its first line, so a cache keyed by the source's hash never hands
    out a module built otherwise (the query module was built with multiply-adds contracted:
    `x * 3 - 0.3` gave 2.78e-17 on the GPU and 5.55e-17 on the CPU for x = 0.1)."""
    note = f"// compile with {' '.join(codegen.COMPILE_OPTIONS)}"
    assert "-fmad=false" in codegen.COMPILE_OPTIONS
    modules = [
        codegen.render_key_kernels(1),
        codegen.render_session_kernels(),
        codegen.render_holistic_runs_kernel(),
    ]
    assert all(module.source.startswith(note) for module in modules)

    class FakeCupy:
        class cuda:  # noqa: N801 - CuPy's spelling
            class Device:
                compute_capability = "90"

        @staticmethod
        def RawModule(**arguments):  # noqa: N802 - CuPy's spelling
            return arguments

    ran: list[list[str]] = []

    def fake_nvcc(command, **_):
        ran.append(command)
        Path(command[command.index("-o") + 1]).write_bytes(b"cubin")

    monkeypatch.setattr(gpu_compile.device, "cupy", lambda: FakeCupy)
    with tempfile.TemporaryDirectory() as folder:
        monkeypatch.setattr(gpu_compile, "cache_directory", lambda: Path(folder))
        monkeypatch.setattr(gpu_compile.shutil, "which", lambda _: None)  # NVRTC
        assert set(codegen.COMPILE_OPTIONS) <= set(gpu_compile._build(modules[0])["options"])
        monkeypatch.setattr(gpu_compile.shutil, "which", lambda _: "nvcc")
        monkeypatch.setattr(gpu_compile.subprocess, "run", fake_nvcc)
        gpu_compile._build(modules[1])
    assert len(ran) == 1 and set(codegen.COMPILE_OPTIONS) <= set(ran[0])
