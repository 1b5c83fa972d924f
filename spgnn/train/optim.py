"""Adam without torch.optim.

``torch.optim.Optimizer`` wraps ``step``/``zero_grad`` with ``torch._disable_dynamo``, and constructing or
stepping any torch optimizer imports ``torch._dynamo``: 1.5-2.5 s of CPU in every process, paid by every rank
of every test and local job. This module uses plain tensor ops only, so ``torch._dynamo`` stays unimported
(tests/test_optim.py checks both that and the trajectory against torch.optim.Adam).

:class:`Adam` is ``torch.optim.Adam`` with ``amsgrad=False``, ``maximize=False`` and L2 ``weight_decay``
(not AdamW), for one group of parameters. At step t = 1, 2, ..., for each parameter p with gradient g:

    g  = g + weight_decay * p
    m  = beta1 * m + (1 - beta1) * g                  (as torch: m.lerp_(g, 1 - beta1))
    v  = beta2 * v + (1 - beta2) * g * g
    p  = p - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

with m = v = 0 initially. The ops are those of torch's single-tensor (CPU) path in the same order, so on CPU
the trajectory is bit-identical to torch.optim.Adam.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["Adam"]


class Adam:
    """Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0); see the module docstring."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        self.params = list(params)
        if not self.params:
            raise ValueError("Adam got an empty parameter list")
        if not 0.0 <= lr or not 0.0 <= eps or not 0.0 <= weight_decay:
            raise ValueError(f"invalid Adam setting: lr={lr}, eps={eps}, weight_decay={weight_decay}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid Adam betas: {betas}")
        self.lr, self.betas = float(lr), (float(betas[0]), float(betas[1]))
        self.eps, self.weight_decay = float(eps), float(weight_decay)
        self.state: list[dict] = [{} for _ in self.params]     # per parameter: step, exp_avg, exp_avg_sq

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                if p.grad.grad_fn is not None:
                    p.grad.detach_()
                else:
                    p.grad.requires_grad_(False)
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        lr, (beta1, beta2), eps, wd = self.lr, self.betas, self.eps, self.weight_decay
        for p, st in zip(self.params, self.state):
            if p.grad is None:
                continue
            grad = p.grad
            if grad.is_sparse:
                raise RuntimeError("spgnn.optim.Adam does not support sparse gradients")
            if not st:
                st["step"] = 0.0
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["step"] += 1.0
            step, exp_avg, exp_avg_sq = st["step"], st["exp_avg"], st["exp_avg_sq"]
            if wd != 0:
                grad = grad.add(p, alpha=wd)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step_size = lr / (1 - beta1 ** step)
            denom = (exp_avg_sq.sqrt() / (1 - beta2 ** step) ** 0.5).add_(eps)
            p.addcdiv_(exp_avg, denom, value=-step_size)

    def state_dict(self) -> dict:
        """torch.optim.Adam's layout (state by parameter index, step as a float32 tensor, one param group),
        so that either optimizer loads the other's."""
        state = {i: {"step": torch.tensor(st["step"], dtype=torch.float32),
                     "exp_avg": st["exp_avg"].clone(), "exp_avg_sq": st["exp_avg_sq"].clone()}
                 for i, st in enumerate(self.state) if st}
        group = {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": self.weight_decay,
                 "amsgrad": False, "maximize": False, "params": list(range(len(self.params)))}
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError("state_dict does not match this optimizer's single group of parameters")
        g = groups[0]
        if g.get("amsgrad") or g.get("maximize") or g.get("decoupled_weight_decay"):
            raise ValueError("spgnn.optim.Adam supports neither amsgrad, maximize nor decoupled weight decay")
        self.lr, self.betas, self.eps, self.weight_decay = g["lr"], tuple(g["betas"]), g["eps"], g["weight_decay"]
        self.state = [{} for _ in self.params]
        for pos, key in enumerate(g["params"]):
            st = state_dict["state"].get(key)
            if not st:
                continue
            p = self.params[pos]
            self.state[pos] = {"step": float(st["step"]),
                               "exp_avg": st["exp_avg"].to(device=p.device, dtype=p.dtype, copy=True),
                               "exp_avg_sq": st["exp_avg_sq"].to(device=p.device, dtype=p.dtype, copy=True)}
