"""Builds spgnn's C kernels (spgnn/csrc/*.c) into the extension module spgnn._native, with OpenMP (gcc's
-fopenmp: the library needs libgomp.so.1, which torch has loaded by then); the rest of the package's metadata is in
setup.cfg."""

from pathlib import Path

from setuptools import Extension, setup

csrc = Path("spgnn", "csrc")
setup(ext_modules=[Extension("spgnn._native", sorted(str(p) for p in csrc.glob("*.c")),
                             depends=sorted(str(p) for p in csrc.glob("*.h")),
                             extra_compile_args=["-O3", "-std=c11", "-fopenmp"], extra_link_args=["-fopenmp"])])
