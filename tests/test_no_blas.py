"""No matrix products in the engine: numpy hands `@`, `np.dot` and their kin to BLAS,
whose threads spin beside the server's worker for the engine's products of inner size 2
(a hex matrix took a third more CPU time than wall time: the server's other work and the
benchmarks' CPU figures paid for it), and whose rounding may change with the thread
count. The products are written out instead (docs/geometry.md, 'No matrix products')."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("geometry", "rulesets", "server")
#: numpy functions that reach BLAS for floating arrays.
BLAS_CALLS = frozenset({"dot", "matmul", "tensordot", "inner", "vdot", "outer", "kron"})


def _offences(source: str) -> list[tuple[int, str]]:
    """(line, what) for every matrix product in a module's source."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp | ast.AugAssign) and isinstance(node.op, ast.MatMult):
            out.append((node.lineno, "@"))
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in BLAS_CALLS and isinstance(
                    f.value, ast.Name) and f.value.id in ("np", "numpy"):
                out.append((node.lineno, f"np.{f.attr}"))
            elif isinstance(f, ast.Attribute) and f.attr == "einsum" and any(
                    k.arg == "optimize" for k in node.keywords):
                out.append((node.lineno, "np.einsum(optimize=...)"))
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_no_matrix_products(package: str) -> None:
    found = [f"{path.relative_to(ROOT)}:{line}: {what}"
             for path in sorted((ROOT / package).rglob("*.py"))
             for line, what in _offences(path.read_text(encoding="utf-8"))]
    assert not found, "matrix products (write them out):\n" + "\n".join(found)


def test_the_check_sees_products() -> None:
    """The check itself finds each form it names."""
    src = ("import numpy as np\na = b @ c\nd @= e\nf = np.dot(g, h)\n"
           "k = np.einsum('ij,jk', x, y, optimize=True)\nm = np.einsum('ij,jk', x, y)\n")
    assert [w for _, w in _offences(src)] == ["@", "@", "np.dot", "np.einsum(optimize=...)"]
