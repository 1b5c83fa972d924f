"""Reports as files: valid JSON (no NaN tokens), whatever numbers numpy computed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def json_safe(obj):
    """`obj` with every NaN or infinite float (which JSON cannot hold) replaced by None, and numpy's scalars and
    arrays as Python's numbers and lists (so that a figure computed in numpy never loses a run its report)."""
    if isinstance(obj, np.generic | np.ndarray):
        obj = obj.tolist()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def write_json(path, obj, default=None) -> None:
    """`obj` as indented, valid JSON (no NaN tokens: `json_safe`) at `path`, its folder made if missing
    (`default` as json.dumps takes it)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(json_safe(obj), indent=1, default=default, allow_nan=False))
