"""Minibatch sampling written as sparse matrix products: GraphSAGE node-wise and LADIES layer-wise samplers
drawing many minibatches at once (`sampler`), and their form over a graph split across ranks (`distributed`)."""

from .sampler import Minibatch, make_sampler, parse_sampler

__all__ = ["Minibatch", "make_sampler", "parse_sampler"]
