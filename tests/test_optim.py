"""spgnn.train.optim.Adam follows torch.optim.Adam's trajectory and does not import torch._dynamo."""

import subprocess
import sys

import pytest
import torch

from spgnn.train.optim import Adam

# The ops are torch's single-tensor path in the same order, so on CPU the trajectories are bit-identical; the
# tolerance only leaves room for a torch release that reorders its arithmetic by an ulp or two.
RTOL, ATOL = 1e-6, 1e-9


def _params(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(5, 3), (3,), (), (2, 4, 2)]
    return [torch.randn(s, generator=g, dtype=dtype).requires_grad_() for s in shapes]


def _run(make_opt, dtype, steps=20, set_to_none=False):
    params = _params(dtype)
    opt = make_opt(params)
    g = torch.Generator().manual_seed(1)
    traj = []
    for t in range(steps):
        opt.zero_grad(set_to_none=set_to_none)
        loss = sum((p * torch.randn(p.shape, generator=g, dtype=dtype)).sum() for p in params)
        loss.backward()
        if t % 7 == 3:                  # a parameter without a gradient this step is left alone
            params[1].grad = None
        opt.step()
        traj.append([p.detach().clone() for p in params])
    return traj


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lr,weight_decay,betas,eps", [
    (1e-3, 0.0, (0.9, 0.999), 1e-8),
    (1e-2, 5e-4, (0.9, 0.999), 1e-8),
    (0.3, 0.1, (0.8, 0.99), 1e-6),
    (5e-2, 0.0, (0.0, 0.5), 1e-3),
])
@pytest.mark.parametrize("set_to_none", [False, True])
def test_same_trajectory_as_torch(dtype, lr, weight_decay, betas, eps, set_to_none):
    kw = dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps)
    ours = _run(lambda ps: Adam(ps, **kw), dtype, set_to_none=set_to_none)
    ref = _run(lambda ps: torch.optim.Adam(ps, **kw), dtype, set_to_none=set_to_none)
    for t, (a, b) in enumerate(zip(ours, ref, strict=True)):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y, rtol=RTOL, atol=ATOL, msg=lambda m, t=t: f"step {t + 1}: {m}")
    assert not torch.equal(ours[-1][0], _params(dtype)[0])          # the parameters did move


def test_state_dict_round_trip_with_torch():
    kw = dict(lr=1e-2, weight_decay=1e-3)
    ps_ref, ps_ours = _params(torch.float32), _params(torch.float32)
    ref = torch.optim.Adam(ps_ref, **kw)
    g = torch.Generator().manual_seed(2)
    grads = [[torch.randn(p.shape, generator=g) for p in ps_ref] for _ in range(10)]

    def step(opt, ps, gs):
        for p, gr in zip(ps, gs, strict=True):
            p.grad = gr.clone()
        opt.step()

    for gs in grads[:5]:
        step(ref, ps_ref, gs)
    with torch.no_grad():
        for a, b in zip(ps_ours, ps_ref, strict=True):
            a.copy_(b)
    ours = Adam(ps_ours)
    ours.load_state_dict(ref.state_dict())                       # torch's state into ours
    again = Adam(ps_ours)
    again.load_state_dict(ours.state_dict())                     # and ours into ours
    assert again.lr == 1e-2 and again.weight_decay == 1e-3
    for gs in grads[5:]:
        step(ref, ps_ref, gs)
        step(again, ps_ours, gs)
    for a, b in zip(ps_ours, ps_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)
    back = torch.optim.Adam(_params(torch.float32), lr=1.0)
    back.load_state_dict(again.state_dict())                     # ours into torch's
    assert back.param_groups[0]["lr"] == 1e-2


def test_does_not_import_dynamo():
    code = """
import sys
import torch
from spgnn.train.optim import Adam
m = torch.nn.Linear(4, 3)
opt = Adam(m.parameters(), lr=1e-2, weight_decay=5e-4)
for _ in range(2):
    opt.zero_grad(set_to_none=False)
    m(torch.ones(2, 4)).sum().backward()
    opt.step()
opt.load_state_dict(opt.state_dict())
opt.zero_grad()
import spgnn.train.fullbatch, spgnn.train.minibatch
print(sorted(k for k in sys.modules if k == "torch._dynamo" or k.startswith("torch._dynamo.")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
