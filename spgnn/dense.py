"""The dense product of a layer, Y = H·W + C (H n×f_in, W f_in×f_out, C a bias of f_out or an n×f_out addend),
taken by the faster of the two matrix libraries in torch's CPU build, with a backward that multiplies in the faster
orientation.

Backward: dH = dY·Wᵀ, dW = Hᵀ·dY, dC = dY (summed over rows for a bias).

Library. torch multiplies float32 matrices on CPU with MKL, which runs its AVX2 code on AMD processors; the oneDNN
library in the same build (`torch.ops.mkldnn._linear_pointwise`, X·Vᵀ, the op torch's compiler uses for linear
layers) runs AVX-512 there. On a 2-core AMD EPYC (torch 2.13), n = 13752, f_in = 767, f_out = 512, medians of 7:

| product | MKL, 2 threads | oneDNN, 2 threads | MKL, 1 thread | oneDNN, 1 thread |
|---|---|---|---|---|
| H·W | 51 ms | 23 ms | 105 ms | 44 ms |
| dY·Wᵀ | 63 ms | 33 ms | 123 ms | 44 ms |
| Hᵀ·dY, as (dYᵀ·H)ᵀ in oneDNN | 50 ms | 30 ms | 99 ms | 54 ms |

The two agree to float32 rounding (largest difference 1e-6 of the largest entry). So a float32 CPU product of at
least `SMALL` multiply-adds goes through oneDNN (below it, oneDNN's fixed 11 µs a call is more than the product).
The weight gradient goes through oneDNN only where W has at least `WIDE` entries, as Xᵀ·V summed over blocks of
`ROWS` rows, X the narrower of H and dY:
- oneDNN takes its first operand contiguous, so each block of Xᵀ is copied first (`transposed`: spgnn's tiled C
  kernel, from memory 0.39 ms for 256×4096 and 0.74 for 512×4096 on 2 threads, against torch's own copy's 0.98 and
  1.72; in cache 0.19 and 0.33 against 0.46 and 0.98); at
  n = 13752, f_in = 256, f_out = 512 the product took 10.8 ms as Hᵀ·dY and 14.3 as (dYᵀ·H)ᵀ (with torch's copies);
- in blocks, a block's copies are all it holds at once (with H whole, a P = 1 GraphSAGE step on amazon-computers
  peaked about 50 MiB higher), and over n = 131072 rows in one pass it took 125 ms against MKL's 84 at
  f_in = f_out = 256 (in blocks, 81);
- with the C kernel's copies oneDNN is the faster from about 2¹³ entries of W (2 threads, n = 131072: 11.2 against
  MKL's 13.9 ms at f_in = 128, f_out = 64, 19.1 against 25.6 at 128×128; at 64×64 7.9 against 7.4, at 32×32 3.1
  against 2.2; n = 13752: 1.8 against 3.5 ms at 767×16, 0.49 against 0.60 at 64×64); with torch's copies MKL had
  stayed faster at 128×128 (24 against 30 ms).

``set_backend("torch")``, or ``SPGNN_DENSE_BACKEND=torch`` in the environment, keeps every product torch's own.

Narrow products. torch's BLAS runs Hᵀ·dY 3-14× slower when dY has fewer than `NARROW` columns (a layer with few
outputs, such as the last one on a graph with few classes): Hᵀ·dY with n = 131072, f_in = 256, f_out = 8 runs at
3.7 GFlop/s, the same product as (dYᵀ·H)ᵀ at 33-38. There the product is taken as (dYᵀ·H)ᵀ: the same sums, the
other operand in the inner position.
"""

from __future__ import annotations

import os

import torch

from . import native
from .errors import SpgnnError

NARROW = 16        # dY with fewer columns than this (and fewer than H's) takes dW as (dYᵀ·H)ᵀ
SMALL = 1 << 20    # multiply-adds below which a product stays torch's own
WIDE = 1 << 13     # entries of W from which dW goes through oneDNN
ROWS = 1 << 12     # rows of H a block of oneDNN's dW

_BACKENDS = ("onednn", "torch")
_backend: str | None = None
_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def set_backend(name: str) -> None:
    """Choose the dense backend on CPU: "onednn" (float32 products through oneDNN where torch has it, the rest
    torch's own) or "torch" (every product torch's own)."""
    global _backend
    if name not in _BACKENDS:
        raise SpgnnError(f"unknown dense backend {name!r}; choose one of {', '.join(_BACKENDS)}")
    _backend = name


def get_backend() -> str:
    """The current dense backend (first call: $SPGNN_DENSE_BACKEND, else "onednn")."""
    if _backend is None:
        set_backend(os.environ.get("SPGNN_DENSE_BACKEND") or "onednn")
    return _backend


def narrow(f_in: int, f_out: int) -> bool:
    """Whether a product of f_in×f_out W takes its weight gradient as (dYᵀ·H)ᵀ (module docstring)."""
    return f_out < min(NARROW, f_in)


def blocked(f_in: int, f_out: int) -> bool:
    """Whether the weight gradient of an f_in×f_out W goes by row blocks through oneDNN, the narrower operand's
    blocks copied transposed (module docstring), where its operands are float32 CPU tensors and oneDNN's."""
    return not narrow(f_in, f_out) and f_in * f_out >= WIDE


def onednn(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether A·B (A n×k, B k×m) goes through oneDNN: float32 on CPU, at least `SMALL` multiply-adds."""
    return (_ONEDNN and a.device.type == "cpu" and get_backend() == "onednn" and a.dtype == b.dtype == torch.float32
            and a.shape[0] * a.shape[1] * b.shape[1] >= SMALL)


def _linear(x: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """X·Vᵀ (+ bias) by oneDNN: X n×k of any strides, V m×k copied contiguous unless it or Vᵀ is. oneDNN reorders a
    V of other strides (a column block of a wider tensor) by its reference code: X 8292×300 by a 300×256 column
    block of W took 22 s against 0.02 with the copy, and the weight gradient with H such a block 9-26 s against
    0.1."""
    if not (v.is_contiguous() or v.t().is_contiguous()):
        v = v.contiguous()
    return torch.ops.mkldnn._linear_pointwise(x, v, bias, "none", [], "")


def product(h: torch.Tensor, w: torch.Tensor, c: torch.Tensor | None = None) -> torch.Tensor:
    """H·W + C in the faster library (module docstring), with no autograd of its own (C: None, a bias of f_out, or
    an n×f_out addend)."""
    if not onednn(h, w):
        return h @ w if c is None else torch.addmm(c, h, w)
    if c is None or c.dim() == 1:
        return _linear(h, w.t(), c)
    return _linear(h, w.t()).add_(c)


def weight_grad(h: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Hᵀ·G (f_in×f_out) for H n×f_in and G n×f_out, in the faster library and orientation (module docstring)."""
    f_in, f_out = h.shape[1], g.shape[1]
    if narrow(f_in, f_out):
        return (g.t() @ h).t()
    if not blocked(f_in, f_out) or not onednn(g.t(), h):
        return h.t() @ g
    x, v = (h, g) if f_in < f_out else (g, h)        # Xᵀ is copied contiguous: the narrower of the two
    dw = _linear(transposed(x[:ROWS]), v[:ROWS].t())
    for start in range(ROWS, h.shape[0], ROWS):
        dw += _linear(transposed(x[start:start + ROWS]), v[start:start + ROWS].t())
    return dw if f_in < f_out else dw.t()


def transposed(x: torch.Tensor) -> torch.Tensor:
    """Xᵀ as a contiguous tensor, for X r×c whose rows are contiguous (a block of rows): spgnn's tiled C kernel for
    float32 on the CPU (module docstring), else torch's copy."""
    if x.dim() != 2 or x.device.type != "cpu" or x.dtype != torch.float32 or x.stride(1) != 1 \
            or not native.available():
        return x.t().contiguous()
    out = torch.empty(x.shape[1], x.shape[0], dtype=torch.float32, device="cpu")     # not torch's defaults
    if out.numel():
        native.function("transpose_f32", native.i64, native.i64, native.i64, native.addr, native.addr)(
            x.shape[0], x.shape[1], x.stride(0), x.data_ptr(), out.data_ptr())
    return out


def products(h: torch.Tensor, ws, c: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """H·W_1, …, H·W_k + C, each by `product` (C added to the last), with no autograd of their own."""
    return tuple(product(h, w, c if k == len(ws) - 1 else None) for k, w in enumerate(ws))


class _Product(torch.autograd.Function):
    """Y_k = H·W_k for each W_k, each its own product (a contiguous n×f_k result), C added to the last; the backward
    takes them as one product H·[W_1 | … | W_k] of dY = [dY_1 | … | dY_k]."""

    @staticmethod
    def forward(ctx, h, c, *ws):
        need_h, _, *need_w = ctx.needs_input_grad
        ctx.save_for_backward(h if any(need_w) else None, *(ws if need_h else ()))  # what torch's own mm keeps
        ctx.bias = c is not None and c.dim() == 1
        ctx.widths = [w.shape[1] for w in ws]
        return products(h, ws, c)

    @staticmethod
    def backward(ctx, *gs):
        h, *ws = ctx.saved_tensors
        need_h, need_c, *need_w = ctx.needs_input_grad
        g = torch.cat(gs, 1) if len(gs) > 1 else gs[0]
        dh = product(g, (torch.cat(ws, 1) if len(ws) > 1 else ws[0]).t()) if need_h else None
        dws = weight_grad(h, g).split(ctx.widths, 1) if any(need_w) else [None] * len(gs)
        dc = (gs[-1].sum(0) if ctx.bias else gs[-1]) if need_c else None
        return dh, dc, *(d if need else None for d, need in zip(dws, need_w))


def _own(h: torch.Tensor, ws, c: torch.Tensor | None) -> bool:
    """Whether products H·W (W in `ws`) take `_Product`: a gradient is needed and one of them is narrow or
    oneDNN's."""
    return (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (h, c, *ws))
            and any(narrow(*w.shape) or onednn(h, w) for w in ws))


def check_shapes(h: torch.Tensor, ws, c: torch.Tensor | None) -> None:
    """SpgnnError unless H·W_k + C is defined for each W_k: H n×f_in, W_k f_in×f_k, C f_k or n×f_k of the last (oneDNN
    reports a mismatch only as a primitive it could not create)."""
    rows = {w.shape[0] if w.dim() == 2 else None for w in ws}
    fine = h.dim() == 2 and rows == {h.shape[1]}
    if fine and c is not None:          # any C that broadcasts to n×f_k: a bias of f_k, 1×f_k, a scalar, n×f_k
        # (by hand: torch.broadcast_shapes imports torch.fx's symbolic shapes at its first call, 31 MiB a process)
        fine = c.dim() <= 2 and all(a in (1, b) for a, b in zip(c.shape[::-1], (h.shape[0], ws[-1].shape[1])[::-1]))
    if not fine:
        shapes = " and ".join(f"W {tuple(w.shape)}" for w in ws) + ("" if c is None else f", C {tuple(c.shape)}")
        raise SpgnnError(f"H·W + C is not defined for H {tuple(h.shape)}, {shapes}: W needs H's columns as its rows, "
                         "and C (a bias or an addend) W's columns")


def matmul(h: torch.Tensor, w: torch.Tensor, c: torch.Tensor | None = None) -> torch.Tensor:
    """H·W + C (C: None, a bias of f_out, or an n×f_out addend) for H n×f_in, W f_in×f_out; differentiable, in the
    faster library and weight-gradient orientation (module docstring). A product that needs no gradient, or that
    torch's own mm takes as well (not narrow, not for oneDNN), has no `_Product` node: torch's MmBackward held 40-80
    MiB less at the peak of a GraphSAGE step on amazon-computers than the Python Function did."""
    check_shapes(h, (w,), c)
    return _Product.apply(h, c, w)[0] if _own(h, (w,), c) else product(h, w, c)


def matmuls(h: torch.Tensor, ws, c: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """The products H·W_1, …, H·W_k + C of one H (n×f_in, W_k f_in×f_k; C None, a bias of f_k or an n×f_k addend,
    added to the last), differentiable as `matmul`: each its own product, so each result is a contiguous n×f_k
    tensor (not a column block of one n×Σf_k result), and one backward for all, dH = [dY_1 | … | dY_k]·[W_1 | … |
    W_k]ᵀ and [dW_1 | … | dW_k] = Hᵀ·[dY_1 | … | dY_k]. GraphSAGE's two products of H (n = 13752, f_in = 767,
    f_k = 256, oneDNN) take as long as the one H·[W_n | W_s], and a P = 1 step peaked 40-100 MiB lower than with
    that product split in two column blocks. A bias goes into oneDNN's product (3.6 against 4.1 ms with a separate
    add at f_in = f_k = 256)."""
    ws = tuple(ws)
    check_shapes(h, ws, c)
    return _Product.apply(h, c, *ws) if _own(h, ws, c) else products(h, ws, c)
