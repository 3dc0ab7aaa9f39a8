"""The emoji world's small trained networks on disk: one folder each, ``config.json`` + fp16 safetensors.

The generator, the diffusion model and the judge share this format; :func:`read_weights`,
:func:`load_state` and :func:`write_weights` are its one reader and writer.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["read_weights", "load_state", "write_weights"]


def read_weights(folder: Path, weights_name: str, what: str, train_cmd: str) -> tuple:
    """``(meta, state)``: the folder's ``config.json`` and its weights as float32 tensors.

    Raises
    ------
    FileNotFoundError
        A file is missing (the message names the folder and the command that trains the model).
    """
    folder = Path(folder)
    cfg_path, w_path = folder / "config.json", folder / weights_name
    if not cfg_path.is_file() or not w_path.is_file():
        raise FileNotFoundError(f"{what} missing in {folder} (train it with `{train_cmd}`)")
    from safetensors.torch import load_file

    meta = json.loads(cfg_path.read_text())
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
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: (v.detach().cpu().half() if v.is_floating_point() else v.detach().cpu()).contiguous()
             for k, v in net.state_dict().items()}
    save_file(state, str(folder / weights_name))
    os.chmod(folder / weights_name, 0o644)  # safetensors writes 0600
    (folder / "config.json").write_text(json.dumps(meta, indent=1) + "\n")
    return folder
