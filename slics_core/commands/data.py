"""Data sub-commands: ``embed``, ``fit``, ``evaluate``, ``captions``, ``reproduce``.

Typical use::

    slics embed --dataset coco --annotations instances_train2017.json --images train2017 \\
        --encoder ViT-B-32/openai --cache cache/coco-vit
    slics embed --dataset precomputed --embeddings clip-retrieval-out/ --labels labels.csv \\
        --encoder ViT-B-32/openai --cache cache/mine          # embeddings made elsewhere
    slics fit --cache cache/coco-vit --n-atoms 10 --out coco.npz
    slics fit --cache cache/coco-vit --stream --epochs 10 --out coco.npz      # batch by batch, bounded memory
    slics evaluate --cache cache/coco-vit --n-train 20000 --batch-size 2000 --out-dir results/
    slics evaluate --cache cache/coco-vit --batch-size 2000 --stability 5 --n-active 1 2 3 4 --out-dir results/
    slics captions --model coco.npz --cache cache/coco-vit
    slics reproduce --dataset mirflickr --root mirflickr25k --encoder ViT-B-32/openai --out-dir run/
    SLICS_EMOJI_SCALE=0.2 slics reproduce --dataset emoji --out-dir emoji-run/   # the app's offline world

``--encoder`` takes any name :func:`slics_core.encoders.parse_encoder_spec` reads
(presets, ``ARCH/random@SIZE``, ``local:DIR``, ``module:factory``). Every command
that fits or evaluates uses the same split and centring
(:mod:`slics_core.data`: the training split's mean, or ``--mean-file``) and the
method registry (:mod:`slics_core.methods`).
"""
from __future__ import annotations

import csv
import functools
import io
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from slics_core import datasets
from slics_core.captions import get_words, prepare_text_embeddings, word_captions
from slics_core.commands import CLIError
from slics_core.data import eval_data, fit_inputs, load_cache, vocabulary_embeddings
from slics_core.embed import embed_dataset
from slics_core.emoji.world import DATASET_NAME as EMOJI_DATASET
from slics_core.emoji.world import WORLD_DEFAULTS, DatasetDefaults, emoji_dataset
from slics_core.encoders import concept_text_embeddings, create_encoder, load_titok_codebook
from slics_core.errors import writing
from slics_core.evaluation import (
    SWEEP_METHOD,
    choose_d0,
    d0_rule_words,
    estimate_cost,
    evaluate_methods,
    methods_table_markdown,
    methods_table_rows,
    sweep_d0,
    table_runs,
)
from slics_core.formats import atomic_write_bytes, atomic_write_json
from slics_core.methods import MODES, ORACLE_FSPLICE, absent, fit_method, get_method, method_names, needs_message
from slics_core.precomputed import load_precomputed
from slics_core.preprocessing import load_mean
from slics_core.ray_embed import embed_dataset_ray
from slics_core.retrieval import QuantizedPool, token_count
from slics_core.runs import ResultStore, prefit_models, run_folder, sweep_key, table_key
from slics_core.slics import SLiCS
from slics_core.splits import make_split
from slics_core.stability import (
    COMPARE_METHODS,
    N_ACTIVE_METHOD,
    check_n_active,
    check_n_seeds,
    evaluate_n_active,
    seed_stability,
    stability_markdown,
)
from slics_core.store import EmbeddingStore
from slics_core.streaming import stream_fit
from slics_core.tasks import choose_jobs, fit_bytes, shared_bytes

__all__ = ["GENERIC_DEFAULTS", "dataset_defaults", "load_dataset", "resolve_encoder"]


def _split(Y, n_train, n_val, n_query, seed):
    return make_split(Y, n_train, n_val, n_query, seed=0 if seed is None else seed)


#: Every dataset but the emoji world: ``--encoder`` is needed, the paper's concept prompts, ``--vocab``'s own
#: default, split seed 0.
GENERIC_DEFAULTS = DatasetDefaults(encoder=None, prompt_template="paper", vocabulary=None, split=_split)


def dataset_defaults(name: str) -> DatasetDefaults:
    """Encoder, concept prompt, vocabulary and split of dataset ``name`` (as a cache records it) unless
    given on the command line: the emoji world's own (:data:`slics_core.emoji.world.WORLD_DEFAULTS`),
    else :data:`GENERIC_DEFAULTS`."""
    return WORLD_DEFAULTS if name == EMOJI_DATASET else GENERIC_DEFAULTS


# --------------------------------------------------------------------------- helpers
def resolve_encoder(spec, device=None):
    """The encoder named on the command line (trusted: ``module:factory`` allowed)."""
    try:
        return create_encoder(spec, trusted=True, device=device)
    except (OSError, RuntimeError) as exc:
        raise CLIError(f"cannot load encoder {spec!r}: {exc}") from None


def load_dataset(args):
    """The dataset named by ``--dataset`` and its path options (checked before: ``options.check_dataset_paths``)."""
    kind = args.dataset
    if kind == "coco":
        return datasets.load_coco(args.annotations, args.images)
    if kind == "mirflickr":
        return datasets.load_mirflickr(args.root, args.annotations)
    if kind == "folder":
        return datasets.load_folder(args.images, args.labels)
    if kind == "emoji":  # the app's world: its scenes, labels and sizes ($SLICS_EMOJI_SCALE)
        return emoji_dataset()
    raise CLIError(f"unknown dataset {kind!r}")


def _concept_text(encoder, store, concept_names, templates="paper"):
    if encoder is None or not getattr(encoder, "has_text", False) or not concept_names:
        return
    try:
        W = concept_text_embeddings(encoder, [c.replace("_", " ") for c in concept_names], templates=templates)
        store.save_array("concept_text", W, names=list(concept_names))
    except (NotImplementedError, ValueError) as exc:
        print(f"embed: no concept text embeddings ({exc})", file=sys.stderr)


def _codebook(args, encoder, dim):
    """The codebook named by ``--codebook``, else the encoder's (TiTok), else None; checked against ``dim``."""
    path = getattr(args, "codebook", None)
    if path:
        C = load_titok_codebook(path, token_dim=None)
    else:
        C = getattr(encoder, "codebook", None) if encoder is not None else None
        if C is None:
            return None
    try:
        token_count(dim, C)
    except ValueError as exc:
        raise CLIError(f"--codebook {path}: {exc}" if path else str(exc)) from None
    return C


def _preprocessing_info(args, n_tokens=None):
    info = {"embedding": args.preprocessing}
    if args.preprocessing == "token" and n_tokens:
        info["n_tokens"] = int(n_tokens)
    return info


def _save_codebook(store, C):
    if C is not None:
        store.save_codebook(C)
        print(f"stored a {C.shape[0]} x {C.shape[1]} token codebook: evaluate/reproduce also score the quantized pool",
              file=sys.stderr)


def _embed_precomputed(args, encoder):
    E, ds = load_precomputed(args.embeddings, metadata=args.metadata, labels=args.labels,
                                      images=args.images)
    if encoder is not None and getattr(encoder, "dim", E.shape[1]) != E.shape[1]:
        raise CLIError(f"--encoder {args.encoder!r} gives {encoder.dim}-d embeddings but {args.embeddings} holds "
                       f"{E.shape[1]}-d ones")
    C = _codebook(args, encoder, int(E.shape[1]))
    store = EmbeddingStore(args.cache)
    batch = 4096
    store.begin(ds.ids, args.encoder or "precomputed", int(E.shape[1]), batch,
                _preprocessing_info(args, None if C is None else token_count(E.shape[1], C)),
                {"name": ds.name, "n": len(ds), "encoder_spec": args.encoder,
                 "source": os.path.abspath(args.embeddings),
                 "paths": [os.path.abspath(p) if p else None for p in ds.paths]}, overwrite=args.overwrite)
    if ds.label_report:
        print(f"labels: {ds.label_report}", file=sys.stderr)
    if ds.Y.shape[1]:
        store.save_labels(**ds.labels_dict())
    for b, s in enumerate(range(0, len(E), batch)):
        store.write_batch(b, list(range(s, min(len(E), s + batch))), E[s:s + batch])
    store.finalize()
    _save_codebook(store, C)
    _concept_text(encoder, store, ds.concept_names)
    print(f"imported {len(E)} precomputed {E.shape[1]}-d embeddings ({int(ds.Y.any(axis=1).sum())} labelled, "
          f"{len(ds.concept_names)} concepts) into {args.cache}")
    return store


def run_embed(args):
    """Embed ``--dataset`` into ``--cache``; returns ``(store, encoder)`` (encoder None: precomputed without one)."""
    if args.dataset == "precomputed":
        encoder = resolve_encoder(args.encoder, args.device) if args.encoder else None
        return _embed_precomputed(args, encoder), encoder
    ds = load_dataset(args)
    defaults = dataset_defaults(ds.name)
    args.encoder = args.encoder or defaults.encoder  # given unless it has its own (options.check_dataset_paths)
    if len(ds) == 0:
        raise CLIError("the dataset has no images")
    encoder = resolve_encoder(args.encoder, args.device)
    C = _codebook(args, encoder, int(getattr(encoder, "dim", -1) or -1)) if getattr(encoder, "dim", None) else None
    labels = ds.labels_dict() if ds.Y.shape[1] else None
    n_tokens = getattr(encoder, "n_tokens", None) or (None if C is None else token_count(encoder.dim, C))
    common = {"batch_size": args.embed_batch_size, "preprocessing": _preprocessing_info(args, n_tokens),
              "dataset_info": {"name": ds.name, "n": len(ds), "encoder_spec": getattr(encoder, "spec", args.encoder),
                               "paths": [os.path.abspath(p) if isinstance(p, (str, os.PathLike)) else None
                                         for p in ds.paths]},
              "labels": labels, "overwrite": args.overwrite, "progress": not args.no_progress,
              "image_loader": getattr(ds, "loader", None), "draft": False if args.no_draft else None,
              "transfer": None if args.transfer == "auto" else args.transfer}
    if getattr(args, "backend", "local") == "ray":
        store, stats = embed_dataset_ray(  # imports Ray (only this backend does)
            ds.paths, ds.ids, encoder, args.cache, **common,
            encoder_factory=functools.partial(create_encoder, args.encoder, trusted=True, device=args.device),
            address=args.address, num_gpus_per_actor=args.num_gpus_per_actor, concurrency=args.concurrency)
    else:
        store, stats = embed_dataset(ds.paths, ds.ids, encoder, args.cache, workers=args.workers, **common)
    _save_codebook(store, C)
    if labels is not None:
        _concept_text(encoder, store, ds.concept_names, defaults.prompt_template)
    for f in store.failed():
        print(f"embed: skipped {f['reason']}", file=sys.stderr)
    print(f"embedded {len(ds) - stats['failed']} of {len(ds)} images into {args.cache} "
          f"({stats['computed']} batches computed, {stats['reused']} reused, {stats['failed']} skipped)")
    return store, encoder


def _words(args, dataset_name):
    """The vocabulary of ``--vocab``; without it, the dataset's own (the emoji world's words), else ``wordfreq``."""
    own = dataset_defaults(dataset_name).vocabulary
    if args.vocab is None and own is not None:
        return own()
    return get_words(args.vocab, args.n_words)


def _splice_vocabularies(args, dataset_name, encoder, store, captions=None):
    """The SpLiCE rows' ``(words, W)`` and the oracle row's (or None): ``--vocab``'s words (``captions`` when
    given: they are the same); without it, the dataset's own (:func:`dataset_defaults`: on the emoji world its
    general words and, for the oracle, its label names; ``docs/emoji_world.md``). ``--vocab none``: ValueError."""
    defaults = dataset_defaults(dataset_name)
    if args.vocab is None and defaults.splice_vocabulary is not None:
        words = defaults.splice_vocabulary()
        names = defaults.oracle_vocabulary() if defaults.oracle_vocabulary is not None else None
        return ((words, vocabulary_embeddings(encoder, words, store=store)),
                None if names is None else (names, vocabulary_embeddings(encoder, names, store=store)))
    if captions is not None:
        return captions, None
    words = get_words(args.vocab, args.n_words)
    if words is None:
        raise ValueError("--vocab none")
    return (words, vocabulary_embeddings(encoder, words, store=store)), None


def _cache_encoder(args, data, need_text=True):
    """The text encoder: ``--encoder`` (trusted), else the cache's recorded one (data: trusted=False)."""
    if getattr(args, "encoder", None):
        return resolve_encoder(args.encoder, getattr(args, "device", None))
    if not data.encoder:
        raise CLIError("the cache records no encoder; name one with --encoder")
    try:
        return create_encoder(data.encoder, trusted=False, device=getattr(args, "device", None))
    except ValueError as exc:
        raise CLIError(f"{exc}; name the encoder with --encoder") from None
    except (OSError, RuntimeError) as exc:
        raise CLIError(f"cannot load the cache's encoder {data.encoder!r}: {exc}") from None


def _prepared(args, data, vocab=None, oracle_vocab=None):
    """Split, centring and EvalData, the same for every command (the emoji world: the app's split by default)."""
    split = dataset_defaults(data.name).split(data.Y, args.n_train, args.n_val, args.n_query, args.split_seed)
    mean = load_mean(args.mean_file, dim=data.raw.shape[1]) if getattr(args, "mean_file", None) else None
    ed, _ = eval_data(data, split, mean=mean, vocab=vocab, oracle_vocab=oracle_vocab)
    print(f"splits: {split.sizes()}; centring: {'mean from ' + args.mean_file if mean is not None else 'training mean'}"
          if data.preprocessing == "clip" else f"splits: {split.sizes()}", file=sys.stderr)
    return ed, split


# --------------------------------------------------------------------------- commands
def cmd_embed(args):
    run_embed(args)
    return 0


def _epoch_line(epoch, n_epochs):
    print("fit --stream: started on the sample" if epoch == 0 else f"fit --stream: epoch {epoch}/{n_epochs}",
          file=sys.stderr, flush=True)


def _stream_fit(args):
    """``slics fit --stream``: :func:`slics_core.streaming.stream_fit`, saved and summarised."""
    kwargs = {k: v for k, v in (("epochs", args.epochs), ("start_size", args.start_size)) if v is not None}
    mean = load_mean(args.mean_file) if args.mean_file else None
    model, info = stream_fit(args.cache, method=args.method, n_atoms=args.n_atoms, seed=args.seed,
                             n_active=args.n_active, mean=mean, n_jobs=args.n_jobs, progress=_epoch_line, **kwargs)
    with writing(args.out):
        model.save(args.out)
    skipped = f", {info['unlabelled']} without a label skipped" if info["unlabelled"] else ""
    print(f"fitted {args.method} streaming over {info['n_batches']} batches of {args.cache} ({info['n_items']} items"
          f"{skipped}; start on {info['start_rows']}, {info['epochs']} epochs, {info['steps']} steps; "
          f"{model.n_concepts_} concepts) -> {args.out}")
    return 0


def cmd_fit(args):
    if args.stream:
        return _stream_fit(args)
    data = load_cache(args.cache)
    args.split_seed = args.seed
    ed, split = _prepared(args, data)
    inputs = fit_inputs(ed, split.train, args.n_active)
    model = fit_method(args.method, inputs, args.n_atoms, n_iter=args.n_iter, batch_size=args.batch_size,
                       seed=args.seed, n_jobs=args.n_jobs)
    with writing(args.out):  # a failure names --out, not the temporary file the model is written through
        model.save(args.out)
    err = getattr(model, "history_", [])
    print(f"fitted {args.method} on {len(split.train)} training items ({getattr(model, 'n_concepts_', '?')} concepts"
          + (f", final error {err[-1]:.4f}" if len(err) else "") + f") -> {args.out}")
    return 0


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _write_csv(path, records):
    table = io.StringIO(newline="")
    w = csv.DictWriter(table, fieldnames=list(records[0]))
    w.writeheader()
    w.writerows(records)
    atomic_write_bytes(path, table.getvalue().encode("utf-8"))


def _write_table(rows, out_dir, name, title):
    md = methods_table_markdown(rows, title=title)
    print(md)
    if out_dir:
        _write_csv(os.path.join(out_dir, f"{name}.csv"), methods_table_rows(rows))
        atomic_write_json(os.path.join(out_dir, f"{name}.json"), rows, default=_json_default)
        atomic_write_bytes(os.path.join(out_dir, f"{name}.md"), (md + "\n").encode("utf-8"))
    return md


def _write_stability(records, summary, atoms, out_dir):
    """``--stability``'s tables: printed, and ``stability.csv`` (one row per concept), ``stability_atoms.csv``
    (one row per atom of seed 0's fit: its match in every other seed), ``stability_methods.csv`` (the same
    against the other methods' dictionaries), ``.json`` (with the summary and the pairs of dictionaries) and
    ``.md`` in ``out_dir``."""
    md = stability_markdown(records, summary, atoms)
    print(md)
    if out_dir:
        _write_csv(os.path.join(out_dir, "stability.csv"), records)
        for name, rows in (("stability_atoms", atoms["seeds"]), ("stability_methods", atoms["methods"])):
            if rows:
                _write_csv(os.path.join(out_dir, f"{name}.csv"), rows)
        atomic_write_json(os.path.join(out_dir, "stability.json"), {"concepts": records, "summary": summary,
                                                                     "atoms": atoms}, default=_json_default)
        atomic_write_bytes(os.path.join(out_dir, "stability.md"), (md + "\n").encode("utf-8"))


def _check_eval_args(args):
    """The methods of ``--methods``, each checked against the registry (counts and the sweep are checked before
    this module is imported: :mod:`slics_core.commands.options`)."""
    methods = method_names() if args.methods is None else [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise CLIError(f"--methods names no method; give a comma-separated list of {', '.join(method_names())}")
    unknown = [m for m in methods if m not in method_names()]
    if unknown:
        raise CLIError(f"unknown method(s) {unknown} in --methods; registered: {', '.join(method_names())}")
    return methods


def _quantized_pool(cache, data, ed, split):
    """The quantized candidate pool when the cache holds a token codebook (TiTok), else None."""
    C = EmbeddingStore(cache).load_codebook()
    if C is None:
        return None
    if data.preprocessing != "token":
        print(f"evaluate: the cache has a token codebook but '{data.preprocessing}' preprocessing (TiTok tokens use "
              "'token'); the pool is quantized as it is", file=sys.stderr)
    qp = QuantizedPool.from_embeddings(ed.X[split.pool], C)
    print(f"quantized pool: {qp.n_pool} items x {qp.n_tokens} codes of a {C.shape[0]}-entry codebook "
          "(every method is also scored against it)", file=sys.stderr)
    return qp


def _clock(seconds):
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _prefit(args, results, inputs, runs, what):
    """``--jobs``: fit the dictionaries of ``runs`` (``(method, d0, seed)``) not yet in ``results`` side by side on
    worker processes and keep them there (:func:`slics_core.runs.prefit_models`), so that the runs that follow
    read them; one line says how many workers and why. Nothing with ``--jobs 1`` or without a run folder."""
    jobs = getattr(args, "jobs", 1)
    if results is None or jobs == 1:
        return
    todo = list(dict.fromkeys((get_method(m).name, int(d0), int(s)) for m, d0, s in runs
                              if get_method(m).dictionary and not results.model_path(m, d0, s).is_file()))
    if not todo:
        return
    n, why = choose_jobs(jobs, len(todo), fit_bytes(inputs.X), shared_bytes=shared_bytes(inputs))
    print(f"{what}: {why}", file=sys.stderr)
    if n < 2:
        return

    def progress(stage, done, total):
        if done:
            print(f"{stage}: {done}/{total} fitted", file=sys.stderr)

    prefit_models(results, inputs, todo, n_iter=args.n_iter, batch_size=args.batch_size, n_jobs=n, progress=progress,
                  stage=f"{what} on {n} workers")


def _evaluate(args, ed, split, out_dir, methods, quantized=None):
    """d0 sweep (optional) and methods table; resumable through ``OUT_DIR/runs`` when ``out_dir`` is set."""
    inputs = fit_inputs(ed, split.train)
    methods = [m for m in methods if not absent(m, inputs)]
    params = {"n_iter": args.n_iter, "batch_size": args.batch_size, "k": args.k, "normalization": args.normalization}
    if not out_dir and getattr(args, "jobs", 1) != 1:  # the workers hand their dictionaries over in a run folder
        with tempfile.TemporaryDirectory(prefix="slics-evaluate-") as runs:
            return _evaluate_in(args, ed, split, out_dir, methods, quantized, inputs,
                                ResultStore(run_folder(Path(runs), ed, split, params, quantized)))
    results = ResultStore(run_folder(Path(out_dir) / "runs", ed, split, params, quantized)) if out_dir else None
    return _evaluate_in(args, ed, split, out_dir, methods, quantized, inputs, results)


def _evaluate_in(args, ed, split, out_dir, methods, quantized, inputs, results):
    """:func:`_evaluate` once its run folder ``results`` (or None) is known."""
    d0s = list(range(args.sweep[0], args.sweep[1] + 1)) if args.sweep else []
    seeds = tuple(range(args.seeds))
    n_active = check_n_active(args.n_active or (), ed.Y.shape[1])  # before any run
    if args.stability:  # before any run too: N seeds are N fits, and every seed's dictionary is kept
        check_n_seeds(args.stability, ed.Y.shape[1] * max([args.n_atoms, *d0s]), ed.X.shape[1], "--stability")
    seconds, what = (None, "") if args.no_estimate else estimate_cost(
        ed, split, methods, d0_values=d0s, n_atoms=args.n_atoms, n_iter=args.n_iter, seeds=seeds,
        batch_size=args.batch_size, k=args.k, mode=args.mode, results=results, quantized=quantized)
    if seconds is not None:
        print(f"estimate: about {_clock(seconds)} of compute for {what}"
              + (f"; finished runs are kept in {results.folder} and reused when the same command is run again"
                 if out_dir else ""), file=sys.stderr)
    started = time.perf_counter()
    state = {"done": 0}
    stability_fits = (args.stability + sum(not needs_message(c, inputs) for c in COMPARE_METHODS)
                      if args.stability else 0)  # the seeds, then the compared methods
    n_jobs = max(1, len(d0s) + len(table_runs(methods, seeds, args.batch_size))
                 + len(n_active) * len(table_runs([N_ACTIVE_METHOD], seeds, args.batch_size)) + stability_fits)

    def run_done():
        state["done"] += 1

    def progress(line):
        el = time.perf_counter() - started
        print(f"[{state['done']}/{n_jobs} runs, {_clock(el)}] {line}", file=sys.stderr)

    def seed_done(line):
        run_done()
        progress(line)

    pools = ("original",) + (("quantized",) if quantized is not None else ())
    try:
        d0 = args.n_atoms
        if d0s:
            fresh = [d for d in d0s if results is None or results.get(sweep_key(SWEEP_METHOD, d, 0, MODES)) is None]
            _prefit(args, results, inputs, [(SWEEP_METHOD, d, 0) for d in fresh], "d0 sweep fits")
            recs = sweep_d0(ed, split, d0s, n_iter=args.n_iter, batch_size=args.batch_size, k=args.k,
                            progress=progress, results=results, on_run=run_done)
            d0 = choose_d0(recs)
            print(f"chosen d0 = {d0} ({d0_rule_words(True, args.k, ed.Z is not None)})", file=sys.stderr)
            if out_dir:
                os.makedirs(out_dir, exist_ok=True)
                atomic_write_json(os.path.join(out_dir, "d0_sweep.json"), {"records": recs, "chosen_d0": d0},
                                  default=_json_default)
        table = dict(n_atoms=d0, n_iter=args.n_iter, batch_size=args.batch_size, seeds=seeds, k=args.k, mode=args.mode,
                     normalization=args.normalization, progress=progress, quantized=quantized, results=results,
                     on_run=run_done)
        runs = [(m, d0, seed) for m, seed in table_runs(methods, seeds, args.batch_size) if not needs_message(m, inputs)
                and (results is None or results.get(table_key(m, d0, seed, args.mode, None, pools)) is None)]
        runs += [(SWEEP_METHOD, d0, seed) for seed in range(args.stability or 0)]
        _prefit(args, results, inputs, runs, "table fits")
        rows = evaluate_methods(ed, split, methods, **table)
        if n_active:  # one U-SLiCS row per S~ (evaluate_n_active refuses an S~ above the number of concepts)
            rows += evaluate_n_active(ed, split, n_active, **table)
        stability = None
        if args.stability:
            stability = seed_stability(ed, split, range(args.stability), n_atoms=d0, n_iter=args.n_iter,
                                       batch_size=args.batch_size, k=args.k, mode=args.mode,
                                       normalization=args.normalization, results=results,
                                       progress=seed_done)
    except KeyboardInterrupt:
        if out_dir:
            print(f"interrupted: the finished runs are kept in {results.folder}; run the same command again to "
                  "resume", file=sys.stderr)
        raise
    print(f"compute time: {_clock(time.perf_counter() - started)}", file=sys.stderr)
    _write_table(rows, out_dir, "methods", f"mAP@{args.k} (d0={d0}, AP normalisation: {args.normalization})")
    if stability is not None:
        if args.batch_size is None:
            print("stability: without --batch-size the fit may not depend on the seed (then every matched cos is 1)",
                  file=sys.stderr)
        _write_stability(*stability, out_dir)
    return rows, d0, results


def _vocab(args, data, store, need):
    """The SpLiCE rows' and the oracle row's vocabularies (:func:`_splice_vocabularies`), or (None, None) with a
    message saying why."""
    if not need:
        return None, None
    try:
        return _splice_vocabularies(args, data.name, _cache_encoder(args, data), store)
    except (CLIError, ValueError, ImportError, OSError) as exc:
        print(f"evaluate: no vocabulary ({exc}); the SpLiCE rows say so", file=sys.stderr)
        return None, None


def cmd_evaluate(args):
    methods = _check_eval_args(args)
    data = load_cache(args.cache)
    vocab, oracle = _vocab(args, data, EmbeddingStore(args.cache),
                           any(m in ("SpLiCE", "F-SpLiCE", ORACLE_FSPLICE) for m in methods))
    ed, split = _prepared(args, data, vocab, oracle)
    _evaluate(args, ed, split, args.out_dir, methods, _quantized_pool(args.cache, data, ed, split))
    return 0


def _captions(model, words, W, top):
    Wp = prepare_text_embeddings(np.asarray(W, dtype=np.float64))[0]
    return word_captions(model.atoms_, model.groups_, Wp, words, top_k=top)


def cmd_captions(args):
    model = SLiCS.load(args.model)
    data = load_cache(args.cache)
    words = _words(args, data.name)
    if words is None:
        raise CLIError("captions need a vocabulary: give --vocab wordfreq, a word-list file or laion-download")
    W = vocabulary_embeddings(_cache_encoder(args, data), words, store=EmbeddingStore(args.cache))
    caps = _captions(model, words, W, args.top)
    lines = ["| Subspace | Word caption |", "|---|---|"]
    lines += [f"| {name} | {', '.join(c)} |" for name, c in zip(model.concept_names_, caps)]
    print("\n".join(lines))
    if args.out:
        atomic_write_json(args.out, dict(zip(model.concept_names_, caps)))
    return 0


def cmd_reproduce(args):
    methods = _check_eval_args(args)  # before the output folder is created
    out = Path(args.out_dir)
    args.cache = args.cache or str(out / "cache")
    store, encoder = run_embed(args)  # refuses a missing --encoder before anything is written
    out.mkdir(parents=True, exist_ok=True)
    data = load_cache(args.cache)
    vocab = splice = oracle = None
    words = _words(args, data.name) if getattr(encoder, "has_text", False) else None  # the captions' words
    if words is not None:
        vocab = (words, vocabulary_embeddings(encoder, words, store=store))
        splice, oracle = _splice_vocabularies(args, data.name, encoder, store, vocab)
    ed, split = _prepared(args, data, splice, oracle)
    _rows, d0, results = _evaluate(args, ed, split, str(out), methods, _quantized_pool(args.cache, data, ed, split))
    if vocab is not None:  # captions of the sweep's method fitted on the training split only (its fit when kept)
        model = results.model(SWEEP_METHOD, d0, 0, lambda: fit_method(
            SWEEP_METHOD, fit_inputs(ed, split.train), d0, n_iter=args.n_iter, batch_size=args.batch_size, seed=0))
        with writing(out / "s-slics.npz"):
            model.save(out / "s-slics.npz")
        caps = _captions(model, vocab[0], vocab[1], 5)
        atomic_write_json(out / "captions.json", dict(zip(ed.concept_names, caps)))
        print("\n".join(f"{n}: {', '.join(c)}" for n, c in zip(ed.concept_names, caps)))
    print(f"results in {out}")
    return 0
