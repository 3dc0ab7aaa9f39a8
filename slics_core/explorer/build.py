"""The one workspace builder: :func:`build_workspace` of labelled embeddings from any source, and
:func:`build_workspace_from_cache` of an embedding cache (``slics workspace``).

Whatever the source (the emoji world, :mod:`slics_core.explorer.emoji_build`; COCO, MIRFlickr, a
folder or precomputed embeddings through their cache):

1. the split: :func:`slics_core.splits.make_split` (the emoji world passes its own sizes to the same
   function);
2. centring: the preprocessing is fitted on the training split (:func:`slics_core.data.preprocess`;
   ``clip``: the training mean, or a precomputed mean file the user gives);
3. every registered method is fitted on the training split, dictionary methods for every ``d0``; a
   method whose needs are not met (no concept prompts, no vocabulary) or whose fit fails is recorded
   in ``skipped`` with the reason, and the others are kept; the fits are independent tasks, fitted side by
   side on ``n_jobs`` worker processes or on Ray (:mod:`slics_core.tasks`), the same models for any number;
4. ``d0`` is chosen on the validation split by the paper's rule (:func:`slics_core.evaluation.sweep_d0`
   of the fitted :data:`~slics_core.evaluation.SWEEP_METHOD` models, then
   :func:`slics_core.evaluation.choose_d0`: sub-label mAP@20 of partial components); with no validation
   split (or one fitted ``d0``) nothing is chosen (``chosen_d0`` stays None) and the workspace's
   ``default_d0`` is :func:`slics_core.evaluation.fallback_d0`, the one fallback rule;
5. the caption vocabulary (the emoji world: the words its text encoder knows; datasets: the 10 000
   most frequent English words, or a word list) is embedded with the workspace's encoder when it has
   a text tower; so are, when given, the SpLiCE baselines' own vocabulary (the emoji world's general
   words) and the label names of the oracle row (:data:`slics_core.methods.ORACLE_FSPLICE`);
6. the workspace is saved (:func:`slics_core.explorer.workspace_files.save_workspace`), a sharded pool gets
   the index of the kind the one rule chooses (exact streamed search for a small pool, else the on-disk index,
   whose recall against exact search is measured: :func:`build_pool_index`, :func:`measure_pool_index`), and
   what the pages show on arrival is prepared
   (:func:`slics_core.explorer.arrival.prepare_pages`, its steps on the same ``n_jobs`` workers).
"""
from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np

from slics_core.captions import get_words
from slics_core.data import LabelledEmbeddings, eval_data, fit_inputs, load_cache, vocabulary_embeddings
from slics_core.encoders import create_encoder
from slics_core.evaluation import SWEEP_METHOD, SWEEP_MODE, choose_d0, sweep_d0
from slics_core.explorer.arrival import prepare_pages
from slics_core.explorer.workspace import POOL_INDEX, POOL_RECALL, Workspace, pool_index_kind
from slics_core.explorer.workspace_files import check_target, save_workspace
from slics_core.extras import MissingExtraError
from slics_core.formats import atomic_write_json
from slics_core.methods import absent, fit_method, get_method, method_names, needs_message
from slics_core.ondisk_index import build_ondisk_index
from slics_core.preprocessing import load_mean
from slics_core.retrieval import StreamingIndex
from slics_core.shards import BLOCK_ROWS, SAMPLE_ROWS, PoolShards, seeded_sample
from slics_core.splits import Split, make_split
from slics_core.store import EmbeddingStore
from slics_core.tasks import choose_jobs, fit_bytes, one_thread, run_tasks, shared_bytes, start_workers
from slics_core.vocabulary_names import DEFAULT_VOCABULARY, NO_VOCABULARY

__all__ = ["attach_pool_shards", "build_pool_index", "build_workspace", "build_workspace_from_cache",
           "measure_pool_index", "report_progress", "RECALL_K", "RECALL_QUERIES"]

#: recall@RECALL_K of a sharded workspace's on-disk index is measured at build on RECALL_QUERIES query rows.
RECALL_K = 20
RECALL_QUERIES = 20


def report_progress(progress, stage, done=0, total=1):
    """``progress(stage, done, total)`` when a progress callback is given."""
    if progress is not None:
        progress(stage, done, total)


def _fit_progress(progress, stage, job, n_jobs):
    """SLiCS ``callback`` that moves ``progress`` batch by batch within fit number ``job`` of ``n_jobs``.

    ``done`` / ``total`` count batches over all epochs, offset by the jobs already done
    (``job * batches_per_fit + batches_done`` of ``n_jobs * batches_per_fit``), so the fraction keeps
    counting the whole fit step and moves within one fit.
    """
    if progress is None:
        return None

    def callback(epoch, n_epochs, batch, n_batches):
        per_fit = n_epochs * n_batches
        progress(stage, job * per_fit + epoch * n_batches + batch + 1, n_jobs * per_fit)
    return callback


def _fit_task(inputs, task, callback=None):
    """One fit of the build, ``task = (method, d0, n_iter, seed)``: ``("ok", model)`` or ``("failed", reason)``
    (seeded by ``seed`` alone, so the model never depends on which worker fits it, or when)."""
    m, d0, n_iter, seed = task
    try:
        return "ok", fit_method(m, inputs, d0, n_iter=n_iter, batch_size=None, seed=seed, ridge=0.0,
                                callback=callback)
    except (ValueError, np.linalg.LinAlgError) as exc:  # one method failing never sinks the others
        return "failed", str(exc)


def _fit_cost(task) -> tuple:
    """A fit's relative cost, to start the longest first: iterative methods (epochs of batches) before the
    others, then by ``d0`` (ties keep the task order)."""
    m, d0, _n_iter, _seed = task
    return (bool(get_method(m).reports_batches), d0 or 0)


def resolve_jobs(jobs, n_tasks, inputs, say=None) -> int:
    """:func:`slics_core.tasks.choose_jobs` for ``n_tasks`` fits of ``inputs``; ``say(line)`` gets its reason."""
    n, why = choose_jobs(jobs, n_tasks, fit_bytes(inputs.X), shared_bytes=shared_bytes(inputs))
    if say is not None:
        say(f"fits: {why}")
    return n


def _method_list(methods) -> list:
    """The registered names of ``methods`` (None: every registered method)."""
    return method_names() if methods is None else [get_method(m).name for m in methods]


def _fit_jobs(names, d0_values) -> list:
    """The build's fits ``(method, d0)``: a dictionary method at every d0, the others once (d0 None)."""
    return [(m, d) for m in names for d in (d0_values if get_method(m).dictionary else (None,))]


def _early_workers(data, split, d0_values, methods, n_jobs, backend):
    """Start the fits' workers (:func:`slics_core.tasks.start_workers`) before the vocabulary and the centring,
    when :func:`resolve_jobs` will choose more than one: the number it will choose, estimated from the
    training split's shape and every method that may be fitted (the same number on every ordinary build; a
    different one only costs the early start). None when the fits will run here."""
    if backend != "loky" or n_jobs == 1:
        return None
    n_tasks = len(_fit_jobs(_method_list(methods), d0_values))  # at most: before the vocabulary is known
    n_train, d = len(split.train), np.shape(data.raw)[1]
    X = np.broadcast_to(np.float64(0), (n_train, d))  # a shape, no memory
    n, _why = choose_jobs(n_jobs, n_tasks, fit_bytes(X), shared_bytes=n_train * d * (8 + 4))  # centred + raw
    return start_workers(n, ("slics_core.explorer.build",)) if n > 1 else None


def _fit_all(inputs, jobs, skipped, *, n_iter, seed, progress, n_jobs, backend, address, say):
    """The models of every ``(method, d0)`` of ``jobs``, fitted one after another here (``n_jobs`` 1: progress
    moves batch by batch) or on worker processes / Ray (progress moves fit by fit); failed methods go to
    ``skipped``. The same models whatever ``n_jobs``: each fit is seeded by ``seed`` alone."""
    tasks = [(m, d0, n_iter, seed) for m, d0 in jobs]
    if backend == "ray" and n_jobs in (None, -1) and address:  # a cluster's CPUs limit the tasks in flight
        n = max(1, len(tasks))
        if say is not None:
            say(f"fits: {n} Ray tasks, as many at a time as the cluster has CPUs")
    else:
        n = 1 if not tasks else resolve_jobs(n_jobs, len(tasks), inputs, say)
    if n == 1 and backend == "loky":
        results = []
        for i, (m, d0) in enumerate(jobs):
            stage = f"fit: model {i + 1} of {len(jobs)}, {m}" + (f" d0={d0}" if d0 is not None else "")
            report_progress(progress, stage, i, len(jobs))
            with one_thread():  # as on a worker (slics_core.tasks.one_thread)
                results.append(_fit_task(inputs, tasks[i], callback=_fit_progress(progress, stage, i, len(jobs))))
    else:  # the longest fits first (iterative methods, large d0), so that no worker is left with one at the end
        order = sorted(range(len(tasks)), key=lambda i: _fit_cost(tasks[i]), reverse=True)
        counted = None if progress is None else (  # the detail counts the models: "fit: 5 of 22 models on 2 ..."
            lambda _stage, d, t: progress(f"fit: {d} of {t} models on {n} {backend} workers", d, t))
        done = run_tasks(_fit_task, [tasks[i] for i in order], shared=inputs, n_jobs=n, progress=counted,
                         stage="fit", backend=backend, address=address)
        results = [None] * len(tasks)
        for i, result in zip(order, done):
            results[i] = result
    models = {}
    for (m, d0), (status, value) in zip(jobs, results):
        if status == "ok":
            models[(m, d0)] = value
        else:
            skipped[m] = f"fit failed ({value})"
            models = {k: v for k, v in models.items() if k[0] != m}
            warnings.warn(f"{m} was not fitted: {value}", RuntimeWarning, stacklevel=3)
    return models


def _embed_vocabulary(encoder, words, store, progress):
    """Raw text embeddings of the vocabulary, or None (with a warning) when the encoder cannot."""
    if encoder is None or not words:
        return None
    if not getattr(encoder, "has_text", False):
        warnings.warn("the encoder has no text tower: no caption vocabulary, SpLiCE baselines skipped",
                      RuntimeWarning, stacklevel=3)
        return None
    report_progress(progress, f"embed the vocabulary ({len(words)} words)", 0, 1)
    return vocabulary_embeddings(encoder, words, store=store)


def build_workspace(data: LabelledEmbeddings, out, *, split: Split | None = None, n_train=None, n_val=None,
                    n_query=None, seed=0, d0_values=(5, 10, 15), n_iter=10, methods=None, mean=None,
                    vocabulary=NO_VOCABULARY, encoder=None, store=None, name=None, kind="dataset", generator=None,
                    progress=None, replace=True, codebook=None, source=None, overwrite=False,
                    prepare=True, splice_vocabulary=None, oracle_vocabulary=None, pool_shards=None,
                    remote_thumbnails=False, pool_rerank=None, n_jobs=1, backend="loky", address=None,
                    say=None) -> Workspace:
    """Build, save and return a workspace from labelled embeddings (see the module docstring).

    Parameters
    ----------
    data : slics_core.data.LabelledEmbeddings
    out : path or None
        Folder to write. An existing folder is replaced only if it is a workspace. None: not saved
        (the app's preview).
    split : Split, optional
        Default :func:`slics_core.splits.make_split` with ``n_train``, ``n_val``, ``n_query``, ``seed``.
    d0_values : sequence of int
        Atoms per concept fitted for every dictionary method.
    n_iter : int
        SLiCS epochs.
    methods : sequence of str, optional
        Registered methods to fit (default: all of :data:`slics_core.methods.REGISTRY`).
    mean : array-like of shape (d,), optional
        Precomputed centring mean (``clip`` preprocessing); default: the training mean.
    vocabulary : list of str or vocabulary spec
        Caption / SpLiCE vocabulary, embedded with ``encoder``, in the one vocabulary grammar
        (:func:`slics_core.captions.get_words`: a list of words, ``"none"`` (the default here), ``"wordfreq"``,
        a word-list file...; None means the default vocabulary, ``"wordfreq"``).
    splice_vocabulary : list of str, optional
        The SpLiCE baselines' vocabulary when it is not the caption vocabulary (the emoji world).
    oracle_vocabulary : list of str, optional
        The label names: the vocabulary of the oracle row (without it there is no such row).
    encoder : encoder object, optional
        Used for the vocabulary's text embeddings.
    store : EmbeddingStore, optional
        Caches the vocabulary embeddings.
    name, kind, generator : recorded in the workspace (``kind`` is ``"emoji"`` or ``"dataset"``).
    progress : callable ``progress(stage, done, total)``, optional
    codebook : array-like of shape (K, token_dim), optional
        Token codebook (TiTok) kept with the workspace for quantized-pool retrieval.
    prepare : bool
        After saving, compute and store what the pages show on arrival
        (:func:`slics_core.explorer.arrival.prepare_pages`), so no first visit waits.
    source, overwrite : see :func:`save_workspace` (checked before anything is fitted).
    pool_shards : slics_core.shards.PoolShards, optional
        The pool is these shards (:func:`attach_pool_shards`): ``data`` supplies train / val / query (its
        remaining rows still serve the d0 sweep), and ``index["pool"]`` is empty.
    remote_thumbnails : bool
        With ``pool_shards``: thumbnails may be the metadata's ``url`` column (loaded by the browser).
    pool_rerank : int, optional
        With ``pool_shards``: the on-disk index's re-ranking depth, when the pool gets one (:func:`build_pool_index`).
    n_jobs : int or None
        Worker processes fitting the models side by side (:func:`slics_core.tasks.run_tasks`); 1 (the
        default) fits them here one after another; None or -1: every core, as many as the estimated memory
        allows (:func:`slics_core.tasks.choose_jobs`). The workspace does not depend on it.
    backend : {"loky", "ray"}
        Where the fits run (``ray``: Ray tasks on ``address``, or a local Ray); the same workspace.
    say : callable ``say(line)``, optional
        Gets one line per parallel stage (the fits, the pages) saying how many workers it uses, and why.

    Returns
    -------
    Workspace
    """
    out = None if out is None else Path(out)
    if out is not None:
        check_target(out, source, overwrite)
    d0_values = sorted({int(d) for d in d0_values})
    if not d0_values or d0_values[0] < 1:
        raise ValueError(f"d0 values must be positive integers; got {d0_values}")
    if split is None:
        split = make_split(data.Y, n_train, n_val, n_query, seed)
    early = _early_workers(data, split, d0_values, methods, n_jobs, backend)
    words = get_words(vocabulary)
    W = _embed_vocabulary(encoder, words, store, progress)
    Wo = _embed_vocabulary(encoder, oracle_vocabulary, store, progress)
    ed, pre = eval_data(data, split, mean=mean, vocab=None if W is None else (words, W),
                        oracle_vocab=None if Wo is None else (oracle_vocabulary, Wo))
    X = ed.X
    inputs = fit_inputs(ed, split.train)
    Ws = _embed_vocabulary(encoder, splice_vocabulary, store, progress)
    if Ws is not None:
        inputs.vocab_words, inputs.vocab_text = list(splice_vocabulary), Ws
    names, skipped = [], {}
    for m in _method_list(methods):
        if absent(m, inputs):
            continue
        why = needs_message(m, inputs)
        if why:
            skipped[m] = why
            continue
        names.append(m)
    jobs = _fit_jobs(names, d0_values)
    if early is not None and not early.done():  # a stage of its own, so that the fits' seconds are the fits'
        report_progress(progress, "start the workers", 0, 1)
        early.wait()  # the workers have started (or failed to: the fits then start them)
        report_progress(progress, "start the workers", 1, 1)
    models = _fit_all(inputs, jobs, skipped, n_iter=n_iter, seed=seed, progress=progress, n_jobs=n_jobs,
                      backend=backend, address=address, say=say)
    report_progress(progress, "fit", len(jobs), len(jobs))
    index = {"train": split.train, "val": split.val, "query": split.query, "pool": split.pool}
    extras = dict(data.extras)
    images = extras.pop("images", None)
    captions = extras.pop("captions", None)
    ws = Workspace(name=name or data.name, kind=kind, path=out, X=X, raw=np.asarray(data.raw, np.float32),
                   mean=np.asarray(getattr(pre, "mean_", np.zeros(X.shape[1])), dtype=np.float64),
                   labels=data.labels, index=index, models=models, concept_text=data.concept_text,
                   encoder=data.encoder, captions=captions,
                   ids=list(data.ids), images=images, paths=data.paths, preprocessing=data.preprocessing,
                   n_tokens=data.n_tokens, vocab_words=ed.vocab_words, vocab_text=ed.vocab_text,
                   generator=generator,
                   skipped=skipped, extras=extras,
                   codebook=None if codebook is None else np.asarray(codebook, dtype=np.float32))
    d0s = [d for d in d0_values if (SWEEP_METHOD, d) in models]
    if len(split.val) and len(d0s) > 1:  # else ws.default_d0 is the fallback rule's (evaluation.fallback_d0)
        report_progress(progress, "choose d0 on the validation split", 0, 1)
        records = sweep_d0(ed, split, d0s, method=SWEEP_METHOD, models={d: models[(SWEEP_METHOD, d)] for d in d0s},
                           modes=(SWEEP_MODE,))
        ws.d0_scores = [{"d0": r["d0"], "general": round(float(r["general"]), 4), "sub": round(float(r["sub"]), 4)}
                        for r in records]
        ws.chosen_d0 = choose_d0(records)
    if pool_shards is not None:
        attach_pool_shards(ws, pool_shards, remote_thumbnails=remote_thumbnails, seed=seed, progress=progress)
    if out is not None:
        report_progress(progress, "save the workspace", 0, 1)
        save_workspace(ws, out, source=source, overwrite=True, _warn=False)
        report_progress(progress, "save the workspace", 1, 1)
        if pool_shards is not None:
            build_pool_index(ws, progress=progress, **({} if pool_rerank is None else {"rerank": int(pool_rerank)}))
        if prepare:  # what the pages show on arrival, stored in the folder for every process (issue 24)
            prepare_pages(ws, progress, n_jobs=n_jobs if backend == "loky" else 1, say=say)
    return ws


def attach_pool_shards(ws: Workspace, shards: PoolShards, *, remote_thumbnails=False, seed=0,
                       sample_rows=SAMPLE_ROWS, progress=None) -> None:
    """Make ``shards`` the pool of ``ws``: the header records the folder and rows per shard, ``index["pool"]``
    becomes empty, and a seeded sample of ``sample_rows`` pool rows (preprocessed as ``ws.preprocess``) is kept
    in memory for maps and heatmaps. The shards are read through memory maps, one block at a time."""
    if shards.dim != ws.X.shape[1]:
        raise ValueError(f"the shards in {str(shards.folder)!r} hold {shards.dim}-d embeddings but the cache holds "
                         f"{ws.X.shape[1]}-d ones; embed both with the same encoder")
    report_progress(progress, f"sample {min(sample_rows, len(shards))} pool rows", 0, 1)
    rows = seeded_sample(len(shards), sample_rows, seed)
    ws.pool_sample_rows = rows
    ws.pool_sample = np.concatenate([ws.preprocess(shards.rows(rows[a:a + BLOCK_ROWS]))
                                     for a in range(0, rows.size, BLOCK_ROWS)]) if rows.size else None
    ws.pool_shards = {**shards.describe(), "remote_thumbnails": bool(remote_thumbnails),
                      "remote_hosts": shards.remote_hosts() if remote_thumbnails else []}
    ws.index["pool"] = np.zeros(0, dtype=np.int64)
    ws.forget("shards")  # the reader of these shards, opened once: Workspace.shards() returns it
    ws.remember("shards", lambda: shards)
    report_progress(progress, f"sample {rows.size} pool rows", 1, 1)


def build_pool_index(ws: Workspace, *, progress=None, **settings):
    """Give a saved sharded workspace the pool index of the kind :func:`~slics_core.explorer.workspace.pool_index_kind`
    chooses (the one rule, :func:`slics_core.search_index.index_kind`), open it with the one opener
    (:func:`~slics_core.explorer.workspace.open_pool_index`) and return it.

    Below :data:`slics_core.search_index.EXACT_MAX_ROWS` rows nothing is built: the pages search the shards
    exactly, block by block (recall 1.0, fast at that size), and any index folder of a previous build is removed.
    From there the on-disk IVF-PQ index is built in ``ws.path / POOL_INDEX`` (replacing any): the shards are read
    through their memory maps one at a time; rows are indexed, and re-ranked when searched, as
    :meth:`Workspace.preprocess` makes them (what exact search over the pool ranks). Memory: the training sample
    plus one shard's codes. ``settings`` go to :func:`slics_core.ondisk_index.build_ondisk_index` (its defaults
    otherwise). Its recall against exact search is then measured and stored beside it
    (:func:`measure_pool_index`). Without FAISS (the ``[faiss]`` extra) no index is written and the opener says so
    in one ``RuntimeWarning``: the pages then search the shards exactly.
    """
    folder = Path(ws.path) / POOL_INDEX
    shutil.rmtree(folder, ignore_errors=True)  # an index of the previous build's pool or preprocessing
    ws.forget_pool_index()
    if pool_index_kind(ws) == "ondisk":
        stage = f"on-disk index of {ws.n_pool} pool rows"
        report_progress(progress, stage, 0, ws.n_pool)
        try:
            build_ondisk_index(ws.shards().arrays, folder, transform=ws.preprocess, random_state=0,
                               progress=lambda done, total: report_progress(progress, stage, done, total),
                               **settings)
        except MissingExtraError:
            shutil.rmtree(folder, ignore_errors=True)  # the opener below says why there is no index, once
    index = ws.pool_index()
    if not index.exact:
        measure_pool_index(ws, index, progress=progress)
    return index


def measure_pool_index(ws: Workspace, index, *, k=RECALL_K, n_queries=RECALL_QUERIES, seed=0, progress=None):
    """recall@``k`` of ``index`` (a sharded workspace's on-disk index) against exact search over the shards, on
    a seeded sample of ``n_queries`` query-split rows of ``X`` (preprocessed, as the pages' queries are), stored
    in ``ws.path / POOL_INDEX / POOL_RECALL`` and returned (None, nothing stored, without query rows).

    Exact search is :class:`slics_core.retrieval.StreamingIndex`: one pass over the memory-mapped shards, a block
    at a time, their pages released as read (the build's memory bound). recall@k is the mean over the queries of
    |index's top k ∩ exact top k| / k.
    """
    rows = np.asarray(ws.index.get("query", []), dtype=np.int64)
    if rows.size == 0:
        return None
    rows = np.sort(np.random.default_rng(seed).choice(rows, size=min(int(n_queries), rows.size), replace=False))
    k = min(int(k), ws.n_pool)
    stage = f"recall@{k} of the on-disk index on {rows.size} queries (one exact pass over the shards)"
    report_progress(progress, stage, 0, 1)
    Q = ws.X[rows]
    found = index.search(Q, k)[0]
    exact = StreamingIndex(ws.shards(), ws.preprocess).search(Q, k)[0]
    recall = float(np.mean([np.intersect1d(a, b).size / k for a, b in zip(found, exact)]))
    record = {"k": k, "recall": recall, "n_queries": int(rows.size), "rerank": int(getattr(index, "rerank", 0)),
              "nprobe": int(getattr(index, "nprobe", 0)), "seed": int(seed), "query_rows": rows.tolist()}
    atomic_write_json(Path(ws.path) / POOL_INDEX / POOL_RECALL, record)
    report_progress(progress, stage, 1, 1)
    return record


def build_workspace_from_cache(cache, out, *, encoder=None, mean_file=None, vocabulary=DEFAULT_VOCABULARY,
                               n_words=10_000, **kwargs) -> Workspace:
    """:func:`build_workspace` of an embedding cache (``slics embed``).

    Parameters
    ----------
    cache : path
    out : path
    encoder : encoder object, optional
        Text encoder for the vocabulary; default: the cache's encoder resolved with
        ``trusted=False`` (a missing one means no vocabulary, with a warning).
    mean_file : path, optional
        Precomputed centring mean (:func:`slics_core.preprocessing.load_mean`).
    vocabulary : vocabulary spec
        In the one vocabulary grammar (:func:`slics_core.captions.get_words`): ``"wordfreq"`` (the default),
        ``"none"``, ``"laion-download"``, a word-list file or a list of words; None means ``"wordfreq"``.
    n_words : int
        Words read from ``wordfreq`` or a word-list file.
    kwargs : passed to :func:`build_workspace` (``pool_shards``: a :class:`~slics_core.shards.PoolShards`, or
        the folder of one, opened and checked before the cache is read).
    """
    if kwargs.get("pool_shards") is not None and not isinstance(kwargs["pool_shards"], PoolShards):
        kwargs["pool_shards"] = PoolShards(kwargs["pool_shards"])
    data = load_cache(cache)
    mean = load_mean(mean_file, dim=data.raw.shape[1]) if mean_file else None
    words = get_words(vocabulary, n_words)
    if encoder is None and words and data.encoder:
        try:
            encoder = create_encoder(data.encoder, trusted=False)
        except (OSError, ValueError, RuntimeError) as exc:
            warnings.warn(f"no caption vocabulary: the cache's encoder {data.encoder!r} cannot be loaded here ({exc})",
                          RuntimeWarning, stacklevel=2)
    store = EmbeddingStore(cache)
    kwargs.setdefault("codebook", store.load_codebook())
    kwargs.setdefault("source", str(Path(cache).resolve()))
    return build_workspace(data, out, mean=mean, vocabulary=NO_VOCABULARY if words is None else words,
                           encoder=encoder, store=store, **kwargs)
