"""spgnn's C kernels (`spgnn.native`): a kernel on several threads gives what one thread gives, bit for bit, on
the OpenMP runtime torch loaded; a run loads no JIT compiler; and where the kernels are not built, the SpMM falls
back to torch and asking for them says how to build them."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spgnn import native
from spgnn.errors import SpgnnError
from spgnn.hashing import dropout_mask
from spgnn.sparse import kernels
from spgnn.sparse.csr import CSR


@pytest.fixture
def threads():
    """Set torch's (and so the kernels') threads inside the test; restored after."""
    old = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(old)


def test_chunks_on_threads_equal_one_thread(threads, monkeypatch):
    monkeypatch.setattr(kernels, "_backend", "native")
    a = CSR.from_scipy(sp.random(3000, 2000, density=0.01, format="csr", random_state=0, dtype=np.float32))
    h = torch.randn(2000, 40)
    out = {}
    for n in (1, 2, 3):
        threads(n)
        out[n] = (kernels.spmm(a, h), dropout_mask(np.arange(3000), 40, 0.3, key=7))
    for n in (2, 3):
        assert all(torch.equal(x, y) for x, y in zip(out[1], out[n]))
    assert torch.allclose(out[1][0], torch.from_numpy(a.to_scipy() @ h.numpy()), atol=1e-5)


AVX512 = Path("/proc/cpuinfo").exists() and " avx512f" in Path("/proc/cpuinfo").read_text()


@pytest.mark.skipif(not AVX512, reason="the CPU has no AVX-512: only the portable SpMM loop runs here")
def test_avx512_spmm_equals_the_portable_loop(tmp_path):
    """The SpMM's AVX-512 register tiles (float32) against its portable loop (SPGNN_NO_AVX512, in a fresh process),
    int32 and int64 indices, written and accumulated, at widths below, at and past one tile (256 columns): equal to
    float rounding (their sums run in different orders), and both equal to scipy's."""
    code = textwrap.dedent("""
        import sys, numpy as np, scipy.sparse as sp, torch
        from spgnn.sparse import kernels
        from spgnn.sparse.csr import CSR
        out = {}
        for idx in (np.int32, np.int64):
            for f in (1, 10, 16, 33, 256, 300, 530):
                a = CSR.from_scipy(sp.random(300, 200, density=0.15, format="csr", random_state=f, dtype=np.float32))
                a.indices = a.indices.astype(idx)
                h = torch.from_numpy(np.random.default_rng(f).standard_normal((200, f), np.float32))
                z = torch.ones(300, f)
                kernels.spmm(a, h, out=z, accumulate=True)
                ref = a.to_scipy() @ h.numpy()
                out[f"{idx.__name__} {f}"] = np.stack([kernels.spmm(a, h).numpy(), z.numpy(), ref])
        np.savez(sys.argv[1], **out)
    """)
    env = {**os.environ, "SPGNN_SPMM_BACKEND": "native"}
    for name, extra in (("tiles", {}), ("loop", {"SPGNN_NO_AVX512": "1"})):
        res = subprocess.run([sys.executable, "-c", code, str(tmp_path / name)], env=env | extra, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-3000:]
    tiles, loop = np.load(tmp_path / "tiles.npz"), np.load(tmp_path / "loop.npz")
    assert len(tiles.files) == 14
    for key in tiles.files:
        (z_t, acc_t, ref), (z_l, acc_l, _) = tiles[key], loop[key]
        for z in (z_t, z_l):
            np.testing.assert_allclose(z, ref, rtol=1e-5, atol=1e-5, err_msg=key)
        for acc in (acc_t, acc_l):
            np.testing.assert_allclose(acc, ref + 1, rtol=1e-5, atol=1e-5, err_msg=key)
        assert not np.array_equal(z_t, z_l) or key.endswith(" 1"), f"{key}: the two paths ran the same code"


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux's /proc")
def test_kernels_run_on_torchs_openmp_threads():
    """The kernels' library shares the OpenMP runtime torch loaded (one thread pool, sized by torch.set_num_threads),
    rather than starting a second one that would compete with it for the cores (in a fresh process: other
    libraries, such as scikit-learn, bring their own)."""
    code = ("import json, torch\nfrom pathlib import Path\nfrom spgnn import native\nnative.library()\n"
            "maps = Path('/proc/self/maps').read_text().splitlines()\n"
            "print(json.dumps(sorted({line.split()[-1] for line in maps if 'gomp' in line})))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(json.loads(res.stdout)) == 1, res.stdout


def test_training_loads_no_jit_compiler():
    code = ("import sys\nfrom spgnn import cli\n"
            "assert cli.main(['train', '--epochs', '1', '--quiet', '--dropout', '0.5']) == 0\n"
            "assert 'numba' not in sys.modules and 'llvmlite' not in sys.modules, 'a JIT compiler was loaded'\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]


def test_without_the_built_kernels_spmm_falls_back_and_says_how_to_build(monkeypatch):
    monkeypatch.setitem(sys.modules, "spgnn._native", None)          # as if the extension were not built
    native.library.cache_clear()
    monkeypatch.setattr(kernels, "_backend", None)
    monkeypatch.delenv("SPGNN_SPMM_BACKEND", raising=False)
    try:
        assert not native.available()
        assert kernels.get_backend() == "torch"
        with pytest.raises(SpgnnError, match="pip install -e"):
            kernels.set_backend("native")
    finally:
        native.library.cache_clear()


def test_the_old_backend_name_still_picks_the_c_kernels(monkeypatch):
    monkeypatch.setattr(kernels, "_backend", None)
    monkeypatch.setenv("SPGNN_SPMM_BACKEND", "numba")      # this backend's name when its kernel was numba's
    assert kernels.get_backend() == "native"
