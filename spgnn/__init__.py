"""spgnn: distributed GNN training written as sparse-dense matrix products over a process grid."""

from .comm import Comm, Group, Ledger
from .errors import SpgnnError
from .graph import Graph
from .grid import ProcessGrid
from .layers import GNN, GCNConv, SAGEConv
from .partition import Partition, make_partition, make_parts, register, save_partition
from .partition_metrics import partition_metrics
from .partitioned import PartitionedDataset
from .share import Share
from .spmm import ALGORITHMS, DistSpMM
from .trainer import TrainConfig, Trainer

__version__ = "0.1.0"

__all__ = ["ALGORITHMS", "Comm", "DistSpMM", "GCNConv", "GNN", "Graph", "Group", "Ledger", "Partition",
           "PartitionedDataset", "ProcessGrid", "SAGEConv", "Share", "SpgnnError", "TrainConfig", "Trainer",
           "make_partition", "make_parts", "partition_metrics", "register", "save_partition"]
