"""The emoji world's small trained networks on disk: one folder each, ``config.json`` + fp16 safetensors.

The generator, the diffusion model and the judge share this format; :func:`read_weights`,
:func:`load_state` and :func:`write_weights` are its one reader and writer.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from slics_core.extras import require
from slics_core.formats import atomic_write_bytes, read_json

__all__ = ["read_weights", "load_state", "write_weights"]


#: The emoji world's networks are small (the largest, the encoders, about 10 MB): a larger file is not one.
MAX_WEIGHTS_BYTES = 64 * 2**20


def read_weights(folder: Path, weights_name: str, what: str, train_cmd: str, *, as_numpy: bool = False) -> tuple:
    """``(meta, state)``: the folder's ``config.json`` and its weights as float32 tensors (``as_numpy``:
    float32 numpy arrays, without importing torch).

    Raises
    ------
    FileNotFoundError
        A file is missing (the message names the folder and the command that trains the model).
    ValueError
        A file is larger than a model of the emoji world can be (:data:`MAX_WEIGHTS_BYTES`).
    """
    folder = Path(folder)
    cfg_path, w_path = folder / "config.json", folder / weights_name
    if not cfg_path.is_file() or not w_path.is_file():
        raise FileNotFoundError(f"{what} missing in {folder} (train it with `{train_cmd}`)")
    for f in (cfg_path, w_path):
        if f.stat().st_size > MAX_WEIGHTS_BYTES:
            raise ValueError(f"{what}: {f} is {f.stat().st_size} bytes, more than a model of the emoji world "
                             f"({MAX_WEIGHTS_BYTES}); retrain it with `{train_cmd}`")
    meta = read_json(cfg_path)
    if as_numpy:
        load_file = require("safetensors.numpy").load_file

        return meta, {k: v.astype(np.float32) for k, v in load_file(str(w_path)).items()}
    load_file = require("safetensors.torch").load_file

    return meta, {k: v.float() for k, v in load_file(str(w_path)).items()}


def load_state(net, state: dict, folder, what: str):
    """``net`` with ``state`` loaded; weights that do not fit the architecture are a ValueError."""
    try:
        net.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(f"{what} weights in {folder} do not fit its config: {exc}") from exc
    return net


def write_weights(folder: Path, weights_name: str, net, meta: dict) -> Path:
    """Write ``net``'s weights (floating-point tensors in half precision) and ``meta`` into ``folder``."""
    save_file = require("safetensors.torch").save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: (v.detach().cpu().half() if v.is_floating_point() else v.detach().cpu()).contiguous()
             for k, v in net.state_dict().items()}
    save_file(state, str(folder / weights_name))
    os.chmod(folder / weights_name, 0o644)  # safetensors writes 0600
    atomic_write_bytes(folder / "config.json", (json.dumps(meta, indent=1) + "\n").encode("utf-8"))
    return folder
