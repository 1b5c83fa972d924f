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


@pytest.fixture(scope="module")
def fresh_process():
    """What a fresh process holds: the OpenMP runtimes mapped once it has loaded the kernels' library (None without
    Linux's /proc), then the JIT compilers imported once it has also trained an epoch (dropout on: the hashing
    kernels). One process for the two tests that read it: each of its own cost an interpreter and torch (2 s)."""
    code = textwrap.dedent("""\
        import json, sys, torch
        from pathlib import Path
        from spgnn import native
        native.library()
        maps = Path('/proc/self/maps')
        gomp = sorted({line.split()[-1] for line in maps.read_text().splitlines() if 'gomp' in line}) \\
            if maps.exists() else None
        print(json.dumps(gomp), flush=True)
        from spgnn import cli
        assert cli.main(['train', '--epochs', '1', '--quiet', '--dropout', '0.5']) == 0
        print(json.dumps([m for m in ('numba', 'llvmlite') if m in sys.modules]))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    return {"gomp": json.loads(lines[0]), "jit": json.loads(lines[-1])}


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux's /proc")
def test_kernels_run_on_torchs_openmp_threads(fresh_process):
    """The kernels' library shares the OpenMP runtime torch loaded (one thread pool, sized by torch.set_num_threads),
    rather than starting a second one that would compete with it for the cores (in a fresh process: other
    libraries, such as scikit-learn, bring their own)."""
    assert len(fresh_process["gomp"]) == 1, fresh_process["gomp"]


def test_training_loads_no_jit_compiler(fresh_process):
    """A training run (here an epoch of `spgnn train` with dropout) imports neither numba nor llvmlite."""
    assert fresh_process["jit"] == [], "a JIT compiler was loaded"


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


def test_indices_out_of_range_are_an_error_on_any_number_of_threads():
    """Row and column indices outside [0, n) given to the edge-list kernels (segment sums and maxima, attention's
    weighted sum) were skipped on one thread and, on several, widened a thread's run of rows past the result: rows
    past n were written beyond it, negative rows and columns crashed the process. Each is now a SpgnnError naming
    the range, on 1, 2 or 3 threads (in a fresh process: the old kernels' stray writes corrupt the one they run in);
    indices changed in place between the weighted sum's forward and backward are refused by autograd."""
    code = textwrap.dedent("""
        import torch
        from spgnn.errors import SpgnnError
        from spgnn.sparse import attention, segment
        n, nnz = 1000, 60000
        x, p, v = torch.randn(nnz, 4), torch.randn(nnz, 2), torch.randn(n, 2, 8)
        def calls(bad):
            rows, cols = torch.arange(nnz) % n, torch.arange(nnz) % n
            yield "sum", lambda: segment.segment_sum(x, torch.where(torch.arange(nnz) % 4 > 0, bad, rows), n)
            yield "max", lambda: segment.segment_max(x, torch.where(torch.arange(nnz) % 4 > 0, bad, rows), n)
            yield "rows", lambda: attention.weighted_sum(p, torch.full((nnz,), bad), cols, v, n)
            yield "cols", lambda: attention.weighted_sum(p, rows, torch.full((nnz,), bad), v, n)
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            for bad in (n, 10**9, -1, -10**9):
                for name, call in calls(bad):
                    try:
                        call()
                        print(t, bad, name, "no error")
                    except SpgnnError as e:
                        assert f"must lie in [0, {n})" in str(e), e
        rows, cols = torch.arange(nnz) % n, torch.arange(nnz) % n
        out = attention.weighted_sum(p.requires_grad_(), rows, cols, v.requires_grad_(), n)
        rows[0] = -10**9
        try:
            out.sum().backward()
            print("backward: no error")
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e), e
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout == "", res.stdout


def test_what_the_kernels_would_misread_is_refused():
    """A float or two-dimensional index was cast or flattened (rows 0.7, 1.2 summed into rows 0 and 1); a tensor a
    kernel reads by address must be contiguous and on the CPU; `transposed` of three dimensions read it as two."""
    from spgnn.dense import transposed
    from spgnn.sparse import attention, segment
    for rows in (torch.tensor([0.7, 1.2]), torch.tensor([True, False]), torch.tensor([[0], [1]])):
        with pytest.raises(SpgnnError, match="^an index of rows must be one dimension of integers"):
            segment.segment_sum(torch.ones(2, 1), rows, 2)
    with pytest.raises(SpgnnError, match="^an index of rows"):
        attention.weighted_sum(torch.ones(2, 1), [0, 1], [0.5, 1.0], torch.ones(2, 1, 3), 2)
    assert segment.segment_sum(torch.ones(0, 2), [], 3).shape == (3, 2)         # an empty list is no float index
    for x in (torch.ones(4, 3).t(), np.ones((4, 3)).T):
        with pytest.raises(SpgnnError, match="^a C kernel takes"):
            native.ptr(x)
    with pytest.raises(RuntimeError, match="t\\(\\) expects a tensor with <= 2 dimensions"):
        transposed(torch.arange(6.0).reshape(2, 3, 1))
