"""The single-process reference run of a model: logits, input gradient and parameter gradients."""

import numpy as np
import torch
import torch.nn.functional as F

from spgnn.layers import build_model
from spgnn.reference import SerialSpMM


def reference_grads(g, model="gcn", layers=2, hidden=8, dropout=0.5, seed=3, epoch=2, **options):
    """`options`: `build_model`'s batch_norm and the layer's own options (heads, out_heads, …)."""
    torch.manual_seed(seed)
    net = build_model(model, g.num_features, g.num_classes, hidden, layers, dropout, seed, **options)
    algo = SerialSpMM(g.adj, raw=True)
    x = torch.as_tensor(g.x).clone().requires_grad_(True)
    net.train()
    logits = net(algo, x, torch.arange(g.n), epoch)
    m = torch.as_tensor(g.train_mask)
    F.nll_loss(F.log_softmax(logits, 1)[m], torch.as_tensor(g.y)[m]).backward()
    grads = {k: p.grad.numpy() for k, p in net.named_parameters()}
    return logits.detach().numpy(), x.grad.numpy(), grads


def assert_close(actual, expected, what, rtol=1e-5, scale=None):
    """Max-norm relative error: |a − e|_max ≤ rtol·|e|_max (element-wise tolerances are meaningless for
    entries that cancel to near zero), or ≤ rtol·`scale` when given (an array that cancels as a whole, such as
    the gradient of a bias before batch norm, measured against its model's largest gradient). Empty arrays (an
    empty column block) must match in shape."""
    assert np.shape(actual) == np.shape(expected), f"{what}: shape {np.shape(actual)} != {np.shape(expected)}"
    if np.size(expected) == 0:
        return
    scale = max(float(np.abs(expected).max()) if scale is None else scale, 1e-30)
    err = float(np.abs(np.asarray(actual) - expected).max())
    assert err <= rtol * scale, f"{what}: max error {err:.3g} > {rtol} × {scale:.3g}"
