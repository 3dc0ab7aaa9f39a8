"""Stored results of :func:`slics_core.evaluation.sweep_d0` and :func:`slics_core.evaluation.evaluate_methods`.

:class:`ResultStore` keeps finished runs (one JSON file per fit and evaluation, written atomically)
and fitted dictionaries on disk, so that an interrupted sweep or table resumes where it stopped;
:func:`sweep_key` and :func:`table_key` name one run; :func:`run_folder` names the folder of one
configuration (data, split and parameters); :func:`prefit_models` fits a run's dictionaries side by side
on worker processes and keeps them there for the runs to read.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np

from slics_core.formats import atomic_write_json, read_json
from slics_core.methods import fit_method, get_method
from slics_core.tasks import run_tasks

__all__ = ["ResultStore", "prefit_models", "run_folder", "sweep_key", "table_key"]


class ResultStore:
    """Finished runs of :func:`sweep_d0` / :func:`evaluate_methods` kept on disk.

    One JSON file per run (keyed by method, ``d0``, seed...) and one ``.npz`` per
    fitted dictionary, each written atomically (a reader never sees half a file),
    so that a run interrupted at any point resumes with the finished runs kept.
    The folder must belong to one configuration (data, split, training and
    scoring parameters): callers put a digest of it in the folder name.

    Parameters
    ----------
    folder : path-like
    """

    def __init__(self, folder):
        self.folder = Path(folder)

    @staticmethod
    def _name(key):
        parts = [f"{k}-{key[k]}" for k in sorted(key)]
        return re.sub(r"[^A-Za-z0-9._=-]+", "_", "__".join(parts))

    def get(self, key):
        """The record saved under ``key`` (a dict of str / int), or None.

        A damaged file counts as missing (the run is done again).
        """
        p = self.folder / (self._name(key) + ".json")
        if not p.is_file():
            return None
        try:
            rec = read_json(p)
        except (OSError, ValueError):  # DamagedFileError is a ValueError
            return None
        return rec if isinstance(rec, dict) and rec.get("key") == key else None

    def put(self, key, record):
        """Save ``record`` (JSON-able dict) under ``key``, atomically."""
        atomic_write_json(self.folder / (self._name(key) + ".json"), dict(record, key=key))

    def model_path(self, method, d0, seed) -> Path:
        """The file of the fitted dictionary of ``method`` at ``d0`` and ``seed``."""
        return self.folder / ("model__" + self._name({"method": get_method(method).name, "d0": d0, "seed": seed})
                              + ".npz")

    def model(self, method, d0, seed, fit):
        """The fitted model of a dictionary method: loaded from disk, else ``fit()`` and saved."""
        m = get_method(method)
        if not m.dictionary:
            return fit()
        p = self.model_path(m.name, d0, seed)
        if p.is_file():
            try:
                return m.load(p)
            except (OSError, ValueError, KeyError):
                pass  # damaged: fitted again below
        model = fit()
        os.makedirs(self.folder, exist_ok=True)
        model.save(p)
        return model


def _fit_run(inputs, task):
    """One task of :func:`prefit_models`: ``task = (method, d0, seed, n_iter, batch_size, ridge)``."""
    method, d0, seed, n_iter, batch_size, ridge = task
    return fit_method(method, inputs, d0, n_iter=n_iter, batch_size=batch_size, seed=seed, ridge=ridge)


def prefit_models(results: ResultStore, inputs, runs, *, n_iter, batch_size, ridge=0.0, n_jobs=1, progress=None,
                  stage="fit"):
    """Fit, side by side on ``n_jobs`` worker processes (:func:`slics_core.tasks.run_tasks`), the dictionaries of
    ``runs`` (``(method, d0, seed)``) that ``results`` does not hold yet, and save each in ``results``: the runs
    of :func:`~slics_core.evaluation.sweep_d0`, :func:`~slics_core.evaluation.evaluate_methods` and
    :func:`~slics_core.stability.seed_stability` then read them there (``results.model``) instead of fitting one
    after another. Each fit is seeded by its own seed, as those functions fit it, so the scores are the same
    for every ``n_jobs``; each is saved as soon as it is finished (an interrupted run keeps them). Methods
    without a dictionary are left to those functions. Returns the runs fitted.
    """
    todo = []
    for method, d0, seed in runs:
        task = (get_method(method).name, int(d0), int(seed), n_iter, batch_size, ridge)
        if get_method(method).dictionary and task not in todo and not results.model_path(*task[:3]).is_file():
            todo.append(task)
    if not todo:
        return []
    os.makedirs(results.folder, exist_ok=True)

    def keep(i, model):  # at once: an interrupted run keeps the dictionaries already fitted
        model.save(results.model_path(*todo[i][:3]))

    run_tasks(_fit_run, todo, shared=inputs, n_jobs=n_jobs, progress=progress, stage=stage, on_result=keep)
    return [t[:3] for t in todo]


def sweep_key(method, d0, seed, modes):
    """The :class:`ResultStore` key of one ``d0`` of :func:`sweep_d0`."""
    return {"kind": "sweep", "method": get_method(method).name, "d0": int(d0), "seed": int(seed),
            "modes": "+".join(modes)}


def table_key(method, d0, seed, mode, n_active, pools):
    """The :class:`ResultStore` key of one (method, seed) run of :func:`evaluate_methods`."""
    m = get_method(method)
    return {"kind": "table", "method": m.name, "d0": int(d0) if m.dictionary else None, "seed": int(seed),
            "mode": mode, "n_active": n_active, "pools": "+".join(pools)}


def run_folder(parent, data, split, params, quantized=None):
    """``parent/<digest>``: the :class:`ResultStore` folder of one configuration, so that runs of other data,
    another split or other parameters are never reused.

    Parameters
    ----------
    parent : path-like
    data : slics_core.data.EvalData
    split : slics_core.splits.Split
    params : dict
        JSON-able training and scoring parameters (e.g. ``n_iter``, ``batch_size``, ``k``, ``normalization``).
    quantized : slics_core.retrieval.QuantizedPool, optional
    """
    h = hashlib.sha256()
    for a in (data.X, np.packbits(data.Y), None if data.Z is None else np.packbits(data.Z), data.concept_text,
              None if quantized is None else quantized.codebook, split.train, split.val, split.query, split.pool):
        h.update(b"|" if a is None else np.ascontiguousarray(a).tobytes())
    params = dict(params, vocab=hashlib.sha256("\n".join(data.vocab_words or []).encode()).hexdigest())
    h.update(json.dumps(params, sort_keys=True).encode())
    return Path(parent) / h.hexdigest()[:16]
