"""Embedding on a Ray cluster (or a local Ray): :func:`embed_dataset_ray`, the ``--backend ray`` of ``slics embed``.

The result is the ordinary embedding cache of :mod:`slics_core.store` (the same batch files,
``meta.json``, ``embeddings.npy`` and ``ids.json``), so everything that reads a cache reads it, and a
run started by one backend is resumed by either. The pipeline is Ray Data's:

* the dataset has one row per missing batch of the cache (its index and its items' paths), one block
  per row, so Ray spreads batches, never splits one;
* CPU tasks (``map_batches`` with a function) decode and preprocess a batch's images into ``uint8``
  pixels (:func:`slics_core.embed.image_route`), a quarter of float32's bytes in Ray's object store;
* actors (``map_batches`` with a callable class, ``concurrency`` of them, ``num_gpus`` each) hold the
  encoder, built once per actor by ``encoder_factory``, and run the model (normalisation on the device);
* this process takes each finished batch as it comes and writes its batch file atomically
  (:meth:`slics_core.store.EmbeddingStore.write_batch`): only the driver needs the cache folder, the
  workers only the images. A killed run keeps its finished batches; the same call computes only the rest.

Ray is imported only here, and only when a function is called (``pip install "slics-explorer[ray]"``).
"""
from __future__ import annotations

import functools
import json
import os
import sys

import numpy as np

from slics_core._validation import check_k
from slics_core.embed import begin_run, check_encoder_output, image_route, write_result
from slics_core.extras import require
from slics_core.images import ImageLoadError

__all__ = ["check_resources", "embed_dataset_ray", "start_ray"]


def start_ray(address=None, num_cpus=None):
    """Connect to Ray: ``address`` (``"auto"``, ``"ray://host:10001"``, ...), else a local Ray started here.

    A local Ray gets ``num_cpus`` CPUs (default: all) and no dashboard; its session files go under
    ``$RAY_TMPDIR`` when it is set (Ray reads it). Returns True when this call connected (the caller
    shuts it down), False when Ray was already initialised in this process.
    """
    ray = require("ray", "slics embed --backend ray")
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False)
    return True


def check_resources(resources, concurrency, num_gpus_per_actor, *, local=True):
    """Refuse a pipeline the Ray whose ``resources`` (``ray.cluster_resources()``) are given cannot run.

    CPU encoder actors take 1 CPU each and every decoding task 1 CPU, so ``concurrency`` CPU actors need
    ``concurrency + 1`` CPUs: with fewer, the actors hold every CPU and the decoding waits for ever (Ray Data
    only says "backpressured" every 10 s). GPU actors need ``concurrency * num_gpus_per_actor`` GPUs. On a
    ``local`` Ray (this machine's, whose size is fixed) a shortfall raises ValueError saying what Ray sees;
    on a cluster, which may be growing (an autoscaler), it returns the warning to print instead (else None).
    """
    cpus, gpus = float(resources.get("CPU", 0)), float(resources.get("GPU", 0))
    if num_gpus_per_actor:
        need, have, what = concurrency * num_gpus_per_actor, gpus, "GPU"
        fix = f"--concurrency {int(gpus // num_gpus_per_actor)} or fewer GPUs per actor"
        short = need > have
    else:
        need, have, what = concurrency + 1, cpus, "CPU"
        fix = f"--concurrency {max(int(cpus) - 1, 1)}" if cpus >= 2 else "a Ray with at least 2 CPUs"
        short = need > have
    if not short:
        return None
    actors = (f"{concurrency} encoder actor{'s' if concurrency > 1 else ''} on {num_gpus_per_actor:g} GPU each"
              if num_gpus_per_actor else
              f"{concurrency} CPU encoder actor{'s' if concurrency > 1 else ''} (1 CPU each) and the image decoding "
              "(1 CPU)")
    text = f"{actors} need {need:g} {what}s, but Ray sees {have:g}"
    if local:
        raise ValueError(f"{text}: use {fix}, or start Ray with more {what}s (nothing was embedded)")
    return f"{text}: the run waits until the cluster has them (or use {fix})"


def _own(encoder):
    return encoder


def _decode(batch, *, loader, transform):
    """Ray task: rows ``(b, positions, paths)`` -> rows ``(b, positions, pixels, failed, reasons)``."""
    torch = require("torch")

    out = {"b": [], "positions": [], "pixels": [], "failed": [], "reasons": []}
    for b, positions, paths in zip(batch["b"], batch["positions"], batch["paths"]):
        ok, tensors, failed, reasons = [], [], [], []
        for p, path in zip(positions, paths):
            try:
                tensors.append(transform(loader(path.item() if isinstance(path, np.generic) else path)))
                ok.append(int(p))
            except ImageLoadError as exc:
                failed.append(int(p))
                reasons.append(str(exc))
        out["b"].append(int(b))
        out["positions"].append(np.asarray(ok, np.int64))
        out["pixels"].append(torch.stack(tensors).numpy() if tensors else np.zeros((0, 0, 0, 0), np.uint8))
        out["failed"].append(np.asarray(failed, np.int64))
        out["reasons"].append(json.dumps(reasons))
    return {k: _column(v) for k, v in out.items()}


def _column(values):
    """A column of per-row arrays of different shapes (Ray keeps it as a ragged tensor column)."""
    if values and isinstance(values[0], np.ndarray):
        col = np.empty(len(values), dtype=object)
        col[:] = values
        return col
    return np.asarray(values)


class _Embed:
    """Ray actor: holds one encoder (``encoder_factory()``), embeds the decoded batches given to it."""

    def __init__(self, encoder_factory, transfer):
        torch = require("torch")

        self.torch = torch
        self.encoder = encoder_factory()
        self.encode = image_route(self.encoder, transfer)[1]
        self.pin = str(getattr(self.encoder, "device", "")).startswith("cuda")

    def __call__(self, batch):
        emb = []
        for pos, pixels in zip(batch["positions"], batch["pixels"]):
            if len(pos):
                x = self.torch.from_numpy(np.ascontiguousarray(pixels))
                emb.append(check_encoder_output(self.encode(x.pin_memory() if self.pin else x), len(pos)))
            else:
                emb.append(np.zeros((0, max(int(getattr(self.encoder, "dim", 0) or 0), 0)), np.float32))
        return {"b": batch["b"], "positions": batch["positions"], "embeddings": _column(emb),
                "failed": batch["failed"], "reasons": batch["reasons"]}


def embed_dataset_ray(paths, ids, encoder, cache_dir, *, encoder_factory=None, batch_size=64, preprocessing=None,
                      dataset_info=None, labels=None, overwrite=False, progress=True, image_loader=None, draft=None,
                      transfer=None, address=None, num_gpus_per_actor=0, concurrency=1, num_cpus=None):
    """Embed images into a cache directory with Ray, resumably: the cache of :func:`slics_core.embed.embed_dataset`.

    Parameters
    ----------
    paths, ids, cache_dir, batch_size, preprocessing, dataset_info, labels, overwrite, image_loader, draft, transfer
        As :func:`slics_core.embed.embed_dataset`. ``batch_size`` images are one batch file and one
        encoder call (one row of the Ray dataset, so Ray's own ``batch_size`` is 1 row).
    encoder : encoder with a tensor-level API (``image_transform``/``encode_tensors``)
        Gives the cache its id, width, preprocessing and draft size in this process.
    encoder_factory : callable() -> encoder, optional
        Picklable; each actor calls it once to build its own encoder (on the GPU Ray gives it). Default:
        ``encoder`` itself, pickled to the actors (fine on a CPU; give a factory for large models).
    progress : bool
        One line per batch written, and Ray Data's progress bars.
    address : str, optional
        A running Ray cluster (see :func:`start_ray`); default: the Ray of this process if initialised,
        else a local Ray started and shut down here.
    num_gpus_per_actor : float
        GPUs per encoder actor (0: CPU actors).
    concurrency : int
        Encoder actors.
    num_cpus : int, optional
        CPUs of a local Ray (default: all).

    Returns
    -------
    store : EmbeddingStore
    stats : dict
        ``computed`` and ``reused`` batches, ``failed`` items.

    Raises
    ------
    ValueError
        Bad arguments, an encoder without a tensor-level API, a cache of another run in ``cache_dir``, or a
        local Ray with too few CPUs or GPUs for ``concurrency`` actors and the decoding (:func:`check_resources`).
    slics_core.extras.MissingExtraError
        Ray is not installed.
    """
    ray = require("ray", "slics embed --backend ray")
    concurrency = check_k(concurrency, "concurrency")
    if not isinstance(num_gpus_per_actor, (int, float, np.integer, np.floating)) or num_gpus_per_actor < 0:
        raise ValueError(f"num_gpus_per_actor must be a number >= 0; got {num_gpus_per_actor!r}.")
    if transfer == "jpeg":
        raise ValueError("the jpeg transfer (decoding on the encoder's device) runs on the local backend only; "
                         "use transfer='uint8' with Ray.")
    route = image_route(encoder, transfer)
    if route is None:
        raise ValueError(f"encoder {getattr(encoder, 'id', encoder)!r} has no tensor-level API "
                         "(image_transform/encode_tensors); the Ray backend needs one: use the default backend.")
    transform, _, transfer = route
    store, loader, todo, n_batches = begin_run(paths, ids, encoder, cache_dir, batch_size=batch_size,
                                               preprocessing=preprocessing, dataset_info=dataset_info,
                                               labels=labels, overwrite=overwrite, image_loader=image_loader,
                                               draft=draft)
    bs = int(store.meta()["batch_size"])
    started = start_ray(address, num_cpus) if todo else False
    try:
        if todo:
            warning = check_resources(ray.cluster_resources(), concurrency, num_gpus_per_actor,
                                      local=not (address or ray.util.client.ray.is_connected()))
            if warning:
                print(f"embed (ray): {warning}", file=sys.stderr)
            ctx = ray.data.DataContext.get_current()
            ctx.enable_progress_bars = bool(progress)
            rows = [{"b": b, "positions": list(range(b * bs, min(len(paths), (b + 1) * bs))),
                     "paths": [os.fspath(p) if isinstance(p, os.PathLike) else p for p in paths[b * bs:(b + 1) * bs]]}
                    for b in todo]
            ds = ray.data.from_items(rows, override_num_blocks=len(rows))
            # different scheduling strategies keep Ray from fusing decoding into the encoder actors (it fuses
            # map steps with equal remote arguments): decoding runs in its own tasks, spread over the nodes
            ds = ds.map_batches(functools.partial(_decode, loader=loader, transform=transform), batch_size=1,
                                num_cpus=1, scheduling_strategy="SPREAD")
            ds = ds.map_batches(_Embed, fn_constructor_kwargs={"encoder_factory": encoder_factory
                                                               or functools.partial(_own, encoder),
                                                               "transfer": transfer},
                                batch_size=1, concurrency=concurrency, num_gpus=num_gpus_per_actor,
                                num_cpus=0 if num_gpus_per_actor else 1, scheduling_strategy="DEFAULT")
            for k, out in enumerate(ds.iter_batches(batch_size=1, batch_format="numpy")):
                pos = [int(p) for p in out["positions"][0]]
                E = np.asarray(out["embeddings"][0], np.float32) if pos else None
                write_result(store, int(out["b"][0]), pos, E, [int(p) for p in out["failed"][0]],
                             json.loads(str(out["reasons"][0])), encoder)
                if progress:
                    print(f"embed (ray): batch {int(out['b'][0]) + 1}/{n_batches} "
                          f"({k + 1}/{len(todo)} this run)", file=sys.stderr)
    finally:
        if started:
            ray.shutdown()
    meta = store.finalize()
    return store, {"computed": len(todo), "reused": n_batches - len(todo), "failed": meta["n_failed"]}
