"""Dependencies inside mangonel point down: no module imports from a layer above its own or
from a sibling beside it, and the optional heavy libraries stay in their one package.

Layers, lowest first (docs/architecture.md):

    errors < catalog < aggregates < compiler < runtime.host < runtime.operators
      < runtime.cpu | runtime.gpu  (siblings: never each other)
      < runtime.local | runtime.spark  (siblings: never each other)
      < session < entry points (cli, bench, the package's __init__)

Every module under mangonel/ is parsed with `ast`; module-level and function-level imports
(lazy ones too, and those under TYPE_CHECKING) count. CuPy may be imported only under
runtime/gpu, pyspark only under runtime/spark, numba only under runtime/cpu (where the CPU
kernels are jitted; one exception, the GPU backend's host-side loops in runtime/gpu/host_loops.py),
except numba.cuda: only under runtime/gpu (Python window functions
compiled by numba's CUDA target). A third-party `from a import b` counts as `a.b`, so the
most specific rule (numba.cuda before numba) decides.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mangonel"


@dataclass(frozen=True)
class Layer:
    name: str
    rank: int
    modules: tuple[str, ...]  # a module belongs to the layer of its longest matching prefix


LAYERS = (
    Layer("errors", 0, ("mangonel.errors",)),
    Layer("catalog", 1, ("mangonel.catalog",)),
    Layer("aggregates", 2, ("mangonel.aggregates",)),
    Layer("compiler", 3, ("mangonel.compiler",)),
    Layer("runtime.host", 4, ("mangonel.runtime", "mangonel.runtime.host")),
    Layer("runtime.operators", 5, ("mangonel.runtime.operators",)),
    Layer("runtime.cpu", 6, ("mangonel.runtime.cpu",)),
    Layer("runtime.gpu", 6, ("mangonel.runtime.gpu",)),
    Layer("runtime.local", 7, ("mangonel.runtime.local",)),
    Layer("runtime.spark", 7, ("mangonel.runtime.spark",)),
    Layer("session", 8, ("mangonel.session",)),
    Layer(
        "entry points",
        9,
        (
            "mangonel",
            "mangonel.cli",
            "mangonel.bench",
            "mangonel.bench_join",
            "mangonel.bench_gpu",
            "mangonel.bench_tuner",
        ),
    ),
)

# third-party module -> the one layer that may import it (and its submodules; the longest
# matching name decides)
CONFINED = {
    "cupy": "runtime.gpu",
    "pyspark": "runtime.spark",
    "numba": "runtime.cpu",
    "numba.cuda": "runtime.gpu",
}
# modules allowed a confined import outside its layer, each with its reason
EXCEPTIONS = {
    # the GPU backend's host-side loops (staging's copy and narrowing, the output path's
    # copy and key gather) run as numba parallel loops: numpy ufuncs on a thread pool
    # reached a quarter of their rate
    ("mangonel.runtime.gpu.host_loops", "numba"),
}


def confined_to(imported: str) -> str | None:
    """The one layer allowed to import `imported`, None when any may."""
    best = None
    for name, layer in CONFINED.items():
        if imported == name or imported.startswith(name + "."):
            if best is None or len(name) > len(best[0]):
                best = (name, layer)
    return best[1] if best else None


def layer_of(module: str) -> Layer | None:
    best: tuple[int, Layer] | None = None
    for layer in LAYERS:
        for prefix in layer.modules:
            if module == prefix or module.startswith(prefix + ".") and prefix != "mangonel":
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), layer)
    return best[1] if best else None


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(module: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """Every module `source` imports (absolute names), at any depth of the syntax tree."""
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                # `from a import b` imports module a.b when there is one, else names of a;
                # outside mangonel a.b either way (numba.cuda is confined apart from numba)
                child = f"{target}.{alias.name}"
                outside = target.split(".")[0] != "mangonel"
                found.add(child if child in known or outside else target)
    return found


def violations(sources: dict[str, tuple[str, bool]]) -> tuple[set[str], list[str]]:
    """("importer -> imported" that break the layering, other problems) of modules given
    as {name: (source, is_package)}."""
    known = set(sources)
    broken: set[str] = set()
    problems: list[str] = []
    for module, (source, is_package) in sorted(sources.items()):
        own = layer_of(module)
        if own is None:
            problems.append(f"{module} belongs to no layer: add it to LAYERS in this test")
            continue
        for imported in sorted(imports_of(module, source, is_package, known)):
            top = imported.split(".")[0]
            allowed = confined_to(imported)
            if allowed is not None and own.name != allowed and (module, imported) not in EXCEPTIONS:
                broken.add(f"{module} -> {imported}")
            if top != "mangonel":
                continue
            other = layer_of(imported)
            if other is None:
                problems.append(f"{module} imports {imported}, which belongs to no layer")
            elif other is not own and other.rank >= own.rank:
                broken.add(f"{module} -> {imported}")
    return broken, problems


def package_sources() -> dict[str, tuple[str, bool]]:
    return {
        module_name(path, PACKAGE): (path.read_text(), path.name == "__init__.py")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_imports_only_point_down():
    broken, problems = violations(package_sources())
    assert not problems, "\n".join(problems)
    assert not broken, "imports from a layer above or beside the importer's:\n" + "\n".join(
        sorted(broken)
    )


def test_every_module_is_seen():
    sources = package_sources()
    # the layers the test knows exist, so a renamed package cannot leave its rule checking
    # nothing (aggregates arrives with another part of issue 9)
    for name in ("mangonel.compiler.physical", "mangonel.runtime.host.arrays", "mangonel.cli"):
        assert name in sources
    assert len(sources) > 50


def test_the_checker_flags_upward_sideways_lazy_and_confined_imports():
    sources = {
        "mangonel.compiler.fake": (
            "import cupy\ndef f():\n    from mangonel.runtime.cpu import keys\n",
            False,
        ),
        "mangonel.runtime.cpu.keys": ("from ..gpu import kernels\n", False),
        "mangonel.runtime.gpu.kernels": (
            "from mangonel.runtime.host import arrays\nfrom numba import cuda\n"
            "import numba.cuda.random\n",
            False,
        ),
        "mangonel.runtime.gpu.state": ("import numba\nfrom numba import njit\n", False),
        "mangonel.runtime.cpu.generated": ("from numba import cuda\n", False),
        "mangonel.runtime.host.arrays": ("import numpy\nfrom mangonel import errors\n", False),
        "mangonel.errors": ("", False),
        "mangonel.runtime.spark.stage2": ("from mangonel.runtime.local.query import x\n", False),
        "mangonel.runtime.local.query": ("from mangonel.runtime.gpu import kernels\n", False),
        "mangonel.session": ("import numba\nfrom mangonel.runtime.spark import stage2\n", False),
        "mangonel.stray": ("", False),
    }
    broken, problems = violations(sources)
    assert broken == {
        "mangonel.compiler.fake -> cupy",
        "mangonel.compiler.fake -> mangonel.runtime.cpu.keys",
        "mangonel.runtime.cpu.keys -> mangonel.runtime.gpu.kernels",
        "mangonel.runtime.spark.stage2 -> mangonel.runtime.local.query",
        "mangonel.session -> numba",
        "mangonel.runtime.gpu.state -> numba",
        "mangonel.runtime.gpu.state -> numba.njit",
        "mangonel.runtime.cpu.generated -> numba.cuda",
    }
    assert problems == ["mangonel.stray belongs to no layer: add it to LAYERS in this test"]
