"""spgnn: distributed GNN training written as sparse-dense matrix products over a process grid.

The pipeline, a package a stage: `graph` (the graph, its datasets and the adjacencies layers normalise it by) →
`partition` (vertex partitions, a rank's share, partitioned folders) → `comm` (launch, the process grid, counted
collectives) → `spmm` (the distributed SpMM algorithms, a registry) → `distgraph` (`DistGraph`: a rank's share
on a layout, and the operations a model and a loop need there) → `layers` (self-describing layers, a registry:
GCN, GraphSAGE, GAT, GIN, APPNP, GCNII) → `tasks` (what a run learns and how it is judged, a registry; `metrics`)
→ `train` (the built-in full-batch and minibatch runs), with `sampling`
(minibatches as sparse products) beside it; `config`, `plan` and `cost` decide a run before it starts.
"""

from .comm import launch
from .comm.comm import Comm, Group, Ledger
from .comm.grid import ProcessGrid
from .comm.run import run
from .config import TrainConfig
from .distgraph import DistGraph
from .errors import SpgnnError
from .graph.adjacency import Adjacency, register_adjacency
from .graph.graph import Graph
from .graph.pyg import from_pyg, to_pyg
from .layers import (
                     APPNP,
                     GNN,
                     AllReduce,
                     Attend,
                     BatchNorm,
                     Dense,
                     Elementwise,
                     GATConv,
                     GCN2Conv,
                     GCNConv,
                     GINConv,
                     Layer,
                     Linear,
                     SAGEConv,
                     Spmm,
                     build_model,
                     register_layer,
)
from .metrics import average_precision, roc_auc
from .options import Option
from .partition.metrics import partition_metrics
from .partition.partition import Partition, make_partition, make_parts, register, save_partition
from .partition.partitioned import PartitionedDataset
from .partition.share import Share
from .sparse import CSR
from .sparse import spmm as local_spmm
from .spmm import ALGORITHMS, DistSpMM
from .spmm import register as register_algorithm
from .tasks import Task, register_task
from .tasks.link import EdgeSplit
from .train import MinibatchTrainer, Trainer
from .train.link import LinkTrainer

__version__ = "0.1.0"


def _load_plugins() -> None:
    """Register the algorithms, layers and tasks other packages publish under their entry-point groups, once every
    name above is bound: a plug-in written against the top level (``spgnn.register_algorithm``) found a partly
    imported spgnn when the registries loaded it themselves."""
    from .layers.registry import load_entry_points as layers
    from .spmm.registry import load_entry_points as algorithms
    from .tasks.registry import load_entry_points as tasks

    for load in (algorithms, layers, tasks):
        load()


_load_plugins()

__all__ = ["ALGORITHMS", "APPNP", "Adjacency", "AllReduce", "Attend", "BatchNorm", "CSR", "Comm", "Dense", "DistGraph",
           "DistSpMM", "EdgeSplit", "Elementwise", "GATConv", "GCN2Conv", "GCNConv", "GINConv", "GNN", "Graph", "Group",
           "Layer", "Ledger", "Linear", "LinkTrainer", "MinibatchTrainer", "Option", "Partition", "PartitionedDataset",
           "ProcessGrid", "SAGEConv", "Share", "SpgnnError", "Spmm", "Task", "TrainConfig", "Trainer",
           "average_precision", "build_model", "from_pyg", "launch", "local_spmm", "make_partition", "make_parts",
           "partition_metrics", "register", "register_adjacency", "register_algorithm", "register_layer",
           "register_task", "roc_auc", "run", "save_partition", "to_pyg"]
