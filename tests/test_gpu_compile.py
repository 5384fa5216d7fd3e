"""GPU tuning options and the compile context's caches, without a GPU (the build is faked)."""

from __future__ import annotations

import dataclasses

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

    def fake_build(generated, options=()):
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
