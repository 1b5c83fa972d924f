"""Vertex partitions and what is made of them: the partitioners (`register`, entry-point group
``spgnn.partitioners``; built-ins in `partition`, `streaming` and `external`), their quality (`metrics`), a
rank's share of the graph (`share`), partitioned dataset folders and the cache (`partitioned`), and
out-of-core partitioning of edge lists (`ooc`)."""

from . import external, streaming  # noqa: F401  (built-in partitioners register themselves)
from .partition import Partition, available, get_partitioner, make_partition, make_parts, register, save_partition

__all__ = ["Partition", "available", "get_partitioner", "make_partition", "make_parts", "register", "save_partition"]
