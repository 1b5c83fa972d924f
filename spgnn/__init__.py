"""spgnn: distributed GNN training written as sparse-dense matrix products over a process grid.

The pipeline, a package a stage: `graph` (the graph and its datasets) → `partition` (vertex partitions, a
rank's share, partitioned folders) → `comm` (launch, the process grid, counted collectives) → `spmm` (the
distributed SpMM algorithms, a registry) → `layers` (GCN, GraphSAGE, GAT) → `train` (full-batch and minibatch
runs), with `sampling` (minibatches as sparse products) beside it; `config`, `plan` and `cost` decide a run
before it starts.
"""

from .comm import launch
from .comm.comm import Comm, Group, Ledger
from .comm.grid import ProcessGrid
from .config import TrainConfig
from .errors import SpgnnError
from .graph.graph import Graph
from .graph.pyg import from_pyg, to_pyg
from .layers import GNN, GATConv, GCNConv, SAGEConv
from .partition.metrics import partition_metrics
from .partition.partition import Partition, make_partition, make_parts, register, save_partition
from .partition.partitioned import PartitionedDataset
from .partition.share import Share
from .spmm import ALGORITHMS, DistSpMM, Option
from .spmm import register as register_algorithm
from .train import MinibatchTrainer, Trainer

__version__ = "0.1.0"

__all__ = ["ALGORITHMS", "Comm", "DistSpMM", "GATConv", "GCNConv", "GNN", "Graph", "Group", "Ledger",
           "MinibatchTrainer", "Option", "Partition", "PartitionedDataset", "ProcessGrid", "SAGEConv", "Share",
           "SpgnnError", "TrainConfig", "Trainer", "from_pyg", "launch", "make_partition", "make_parts",
           "partition_metrics", "register", "register_algorithm", "save_partition", "to_pyg"]
