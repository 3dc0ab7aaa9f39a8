"""Data sub-commands: ``embed``, ``fit``, ``evaluate``, ``captions``, ``reproduce``.

Typical use::

    slics embed --dataset coco --annotations instances_train2017.json --images train2017 \\
        --encoder ViT-B-32/openai --cache cache/coco-vit
    slics embed --dataset precomputed --embeddings clip-retrieval-out/ --labels labels.csv \\
        --encoder ViT-B-32/openai --cache cache/mine          # embeddings made elsewhere
    slics fit --cache cache/coco-vit --n-atoms 10 --out coco.npz
    slics evaluate --cache cache/coco-vit --n-train 20000 --batch-size 2000 --out-dir results/
    slics captions --model coco.npz --cache cache/coco-vit
    slics reproduce --dataset mirflickr --root mirflickr25k --encoder ViT-B-32/openai --out-dir run/

``--encoder`` takes any name :func:`slics_core.encoders.parse_encoder_spec` reads
(presets, ``ARCH/random@SIZE``, ``local:DIR``, ``module:factory``). Every command
that fits or evaluates uses the same split and centring
(:mod:`slics_core.data`: the training split's mean, or ``--mean-file``) and the
method registry (:mod:`slics_core.methods`).
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from slics_core import datasets
from slics_core.captions import (
    default_vocabulary,
    download_laion_vocabulary,
    load_laion_vocabulary,
    prepare_text_embeddings,
    word_captions,
)
from slics_core.commands import CLIError, check_at_least
from slics_core.data import eval_data, load_cache, make_split, vocabulary_embeddings
from slics_core.emoji import catalog
from slics_core.emoji.scenes import make_scenes
from slics_core.encoders import concept_text_embeddings, create_encoder, load_titok_codebook
from slics_core.errors import writing
from slics_core.evaluation import (
    ResultStore,
    choose_d0,
    evaluate_methods,
    fit_inputs,
    methods_table_markdown,
    methods_table_rows,
    sweep_d0,
    table_runs,
)
from slics_core.formats import atomic_write_json
from slics_core.methods import fit_method, get_method, method_names, needs_message
from slics_core.precomputed import load_precomputed
from slics_core.preprocessing import PREPROCESSING, load_mean
from slics_core.retrieval import QuantizedPool, build_index, token_count
from slics_core.slics import SLiCS
from slics_core.store import EmbeddingStore, embed_dataset

__all__ = ["register", "load_dataset", "resolve_encoder", "get_words"]


# --------------------------------------------------------------------------- helpers
def resolve_encoder(spec, device=None):
    """The encoder named on the command line (trusted: ``module:factory`` allowed)."""
    try:
        return create_encoder(spec, trusted=True, device=device)
    except (OSError, RuntimeError) as exc:
        raise CLIError(f"cannot load encoder {spec!r}: {exc}") from None


def load_dataset(args):
    """The dataset named by ``--dataset`` and its path options."""
    kind = args.dataset
    if kind == "coco":
        if not args.annotations or not args.images:
            raise CLIError("--dataset coco needs --annotations instances_*.json and --images DIR")
        return datasets.load_coco(args.annotations, args.images)
    if kind == "mirflickr":
        if not args.root:
            raise CLIError("--dataset mirflickr needs --root (folder with mirflickr/ and the annotations)")
        return datasets.load_mirflickr(args.root, args.annotations)
    if kind == "folder":
        if not args.images:
            raise CLIError("--dataset folder needs --images DIR (and --labels FILE.csv|json)")
        return datasets.load_folder(args.images, args.labels)
    if kind == "emoji":
        scenes = make_scenes(args.n_images, seed=args.seed)
        ds = datasets.ImageDataset(list(range(len(scenes))), [f"emoji-{args.seed}-{i}" for i in range(len(scenes))],
                                   scenes.general.astype(bool), list(scenes.general_names), scenes.sub.astype(bool),
                                   list(scenes.sub_names), np.array(catalog.SUB_TO_CONCEPT), name="emoji")
        ds.loader = scenes.pil
        return ds
    raise CLIError(f"unknown dataset {kind!r}")


def _add_dataset_args(p):
    g = p.add_argument_group("dataset")
    g.add_argument("--dataset", choices=("coco", "mirflickr", "folder", "precomputed", "emoji"), required=True)
    g.add_argument("--images", help="image folder (coco, folder; precomputed: where the ids' images are)")
    g.add_argument("--annotations", help="COCO instances_*.json, or the MIRFlickr annotation folder")
    g.add_argument("--root", help="MIRFlickr25K root folder")
    g.add_argument("--labels", help="CSV/JSON label file (folder, precomputed)")
    g.add_argument("--embeddings", help="precomputed: clip-retrieval output folder (img_emb/ + metadata/), "
                                        "a .npy file or a .parquet file with an 'embedding' column")
    g.add_argument("--metadata", help="precomputed .npy: ids of its rows (.parquet, .csv or .txt)")
    g.add_argument("--n-images", type=int, default=4000, help="scenes of the emoji world (default 4000)")
    g.add_argument("--seed", type=int, default=0, help="seed of the emoji world / splits (default 0)")


def _add_embed_args(p, reproduce=False):
    p.add_argument("--encoder", required=False, default=None,
                   help="encoder name (ViT-B-32/openai, emoji-small, ViT-B-32/random@64, local:DIR, module:factory); "
                        "for --dataset precomputed: the encoder that made the embeddings (optional)")
    p.add_argument("--cache", required=not reproduce, default=None,
                   help="embedding cache directory" + (" (default OUT_DIR/cache)" if reproduce else ""))
    p.add_argument("--embed-batch-size" if reproduce else "--batch-size", dest="embed_batch_size", type=int,
                   default=64, help="images per encoder batch (64)")
    p.add_argument("--preprocessing", choices=PREPROCESSING, default="clip",
                   help="embedding preprocessing used by fit/evaluate/workspace (clip = unit, centre, unit)")
    p.add_argument("--workers", type=int, default=None,
                   help="image decoding processes (default: one per core less one, up to 16; 0 decodes in the main process)")
    p.add_argument("--no-draft", action="store_true",
                   help="decode JPEGs at full size (default: reduced-size JPEG decoding, never below the encoder's "
                        "input size; a cache is always resumed the way it was begun)")
    p.add_argument("--codebook", default=None,
                   help="token codebook (K, token_dim) .npy/.npz of token embeddings (TiTok), stored with the cache so "
                        "that evaluate/reproduce also score the quantized pool (Table 3); a TiTok encoder's own "
                        "codebook is stored without this option")
    p.add_argument("--overwrite", action="store_true", help="discard an existing cache")
    p.add_argument("--device", default=None)
    p.add_argument("--no-progress", action="store_true")


def _concept_text(encoder, store, concept_names):
    if encoder is None or not getattr(encoder, "has_text", False) or not concept_names:
        return
    try:
        W = concept_text_embeddings(encoder, [c.replace("_", " ") for c in concept_names])
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
    if not args.embeddings:
        raise CLIError("--dataset precomputed needs --embeddings (a clip-retrieval folder, .npy or .parquet)")
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
                {"name": ds.name, "n": len(ds), "encoder_spec": args.encoder, "source": os.path.abspath(args.embeddings),
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


def run_embed(args, encoder=None):
    if args.dataset == "precomputed":
        if encoder is None and args.encoder:
            encoder = resolve_encoder(args.encoder, args.device)
        return _embed_precomputed(args, encoder)
    if not args.encoder:
        raise CLIError(f"--dataset {args.dataset} needs --encoder (e.g. ViT-B-32/openai or emoji-small)")
    ds = load_dataset(args)
    if len(ds) == 0:
        raise CLIError("the dataset has no images")
    encoder = encoder or resolve_encoder(args.encoder, args.device)
    C = _codebook(args, encoder, int(getattr(encoder, "dim", -1) or -1)) if getattr(encoder, "dim", None) else None
    labels = ds.labels_dict() if ds.Y.shape[1] else None
    n_tokens = getattr(encoder, "n_tokens", None) or (None if C is None else token_count(encoder.dim, C))
    store, stats = embed_dataset(ds.paths, ds.ids, encoder, args.cache, batch_size=args.embed_batch_size,
                                 preprocessing=_preprocessing_info(args, n_tokens),
                                 dataset_info={"name": ds.name, "n": len(ds),
                                               "encoder_spec": getattr(encoder, "spec", args.encoder),
                                               "paths": [os.path.abspath(p) if isinstance(p, (str, os.PathLike))
                                                         else None for p in ds.paths]}, labels=labels,
                                 overwrite=args.overwrite, progress=not args.no_progress,
                                 image_loader=getattr(ds, "loader", None), workers=args.workers,
                                 draft=False if args.no_draft else None)
    _save_codebook(store, C)
    if labels is not None:
        _concept_text(encoder, store, ds.concept_names)
    for f in store.failed():
        print(f"embed: skipped {f['reason']}", file=sys.stderr)
    print(f"embedded {len(ds) - stats['failed']} of {len(ds)} images into {args.cache} "
          f"({stats['computed']} batches computed, {stats['reused']} reused, {stats['failed']} skipped)")
    return store


def get_words(spec, n_words=10_000, download_to=None):
    """The vocabulary named by ``--vocab``: ``wordfreq`` (offline default), a word-list file, or ``laion-download``."""
    if spec in (None, "wordfreq", "default"):
        return default_vocabulary(n_words)
    if spec == "laion-download":
        dest = download_to or "laion.txt"
        download_laion_vocabulary(dest)
        spec = dest
    return load_laion_vocabulary(spec, n_words)


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


def _prepared(args, data, vocab=None):
    """Split, centring and EvalData, the same for every command."""
    split = make_split(data.Y, args.n_train, args.n_val, args.n_query, seed=args.split_seed)
    mean = load_mean(args.mean_file, dim=data.raw.shape[1]) if getattr(args, "mean_file", None) else None
    ed, _ = eval_data(data, split, mean=mean, vocab=vocab)
    print(f"splits: {split.sizes()}; centring: {'mean from ' + args.mean_file if mean is not None else 'training mean'}"
          if data.preprocessing == "clip" else f"splits: {split.sizes()}", file=sys.stderr)
    return ed, split


# --------------------------------------------------------------------------- commands
def cmd_embed(args):
    run_embed(args)
    return 0


def cmd_fit(args):
    check_at_least(args, 1, "--n-atoms", "--n-train", "--n-query")
    check_at_least(args, 0, "--n-val")
    data = load_cache(args.cache)
    args.split_seed = args.seed
    ed, split = _prepared(args, data)
    inputs = fit_inputs(ed, split.train, args.n_active)
    model = fit_method(args.method, inputs, args.n_atoms, n_iter=args.n_iter, batch_size=args.batch_size,
                       seed=args.seed)
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


def _write_table(rows, out_dir, name, title):
    md = methods_table_markdown(rows, title=title)
    print(md)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        flat = methods_table_rows(rows)
        with open(os.path.join(out_dir, f"{name}.csv"), "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(flat[0]))
            w.writeheader()
            w.writerows(flat)
        atomic_write_json(os.path.join(out_dir, f"{name}.json"), rows, default=_json_default)
        with open(os.path.join(out_dir, f"{name}.md"), "w") as fh:
            fh.write(md + "\n")
    return md


def _check_eval_args(args):
    """Refuse, in one line naming the option, what would give an empty or meaningless table."""
    check_at_least(args, 1, "--seeds", "--k", "--n-atoms", "--n-train", "--n-query", "--n-words")
    check_at_least(args, 1 if args.sweep else 0, "--n-val")  # the sweep chooses d0 on the validation set
    if args.sweep and args.sweep[0] > args.sweep[1]:
        raise CLIError(f"--sweep LO HI needs LO <= HI; got {args.sweep[0]} {args.sweep[1]}")
    if args.sweep and args.sweep[0] < 1:
        raise CLIError(f"--sweep values must be positive; got {args.sweep[0]}")
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


def _run_folder(out_dir, ed, split, args, quantized):
    """``OUT_DIR/runs/<digest>``: finished runs of this data, split and parameters (resumable)."""
    h = hashlib.sha256()
    for a in (ed.X, np.packbits(ed.Y), None if ed.Z is None else np.packbits(ed.Z), ed.concept_text,
              None if quantized is None else quantized.codebook, split.train, split.val, split.query, split.pool):
        h.update(b"|" if a is None else np.ascontiguousarray(a).tobytes())
    params = {"n_iter": args.n_iter, "batch_size": args.batch_size, "k": args.k, "normalization": args.normalization,
              "vocab": hashlib.sha256("\n".join(ed.vocab_words or []).encode()).hexdigest()}
    h.update(json.dumps(params, sort_keys=True).encode())
    return Path(out_dir) / "runs" / h.hexdigest()[:16]


def _clock(seconds):
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _estimate(ed, split, args, methods, d0s, results, quantized):
    """Seconds the remaining fits and searches should take, from a timed small fit and search; and a summary.

    Timed in CPU seconds of this process (a fit runs on one BLAS thread, so on an idle machine its wall
    time is about its CPU time): a calibration taken while other jobs load the machine is not inflated
    by their share of the cores (it was 15x too high under load with wall time)."""
    from slics_core.evaluation import sweep_key, table_key

    inputs = fit_inputs(ed, split.train)
    n_train, S = len(split.train), ed.Y.shape[1]
    rows = min(n_train, 2000)
    d0c = int(np.median(d0s)) if d0s else args.n_atoms
    sub = fit_inputs(ed, split.train[:rows])
    # untimed first: the first fit and projection of a process load (or, once per machine, compile) the
    # compiled kernels (that made a full-scale estimate 3:20:28 for 0:13:21 of compute)
    fit_method("S-SLiCS", fit_inputs(ed, split.train[:min(rows, 200)]), d0c, n_iter=1, batch_size=None,
               seed=0).project(ed.X[split.query[:2]], None)
    t = time.process_time()
    fit_method("S-SLiCS", sub, d0c, n_iter=0, batch_size=None, seed=0)
    t_init = time.process_time() - t                               # the S-SVD initialisation alone
    t = time.process_time()
    model = fit_method("S-SLiCS", sub, d0c, n_iter=1, batch_size=None, seed=0)
    t_epoch = max(time.process_time() - t - t_init, 0.0) * n_train / rows  # one epoch on the training split
    t_init *= n_train / rows
    nq = min(200, len(split.val) or len(split.query))
    t = time.process_time()
    model.project(ed.X[split.query[:nq]], None)
    t_proj = (time.process_time() - t) / nq                        # projection of one query on every concept
    index = build_index(ed.X[split.pool])
    probe = ed.X[split.query[:256]]
    t = time.process_time()
    index.search(probe, args.k)
    t_vec = (time.process_time() - t) / len(probe)                  # one ranking vector against the pool

    def fit_s(d0, name):
        m = get_method(name)
        if not m.dictionary:
            return 0.0
        # the initialisation (one eigenproblem per concept) hardly depends on d0; the epochs do
        return t_init + (0 if name == "S-SVD" else t_epoch * args.n_iter * d0 / d0c)

    total, n_fits, n_runs, unknown = 0.0, 0, 0, set()
    modes = ("partial", "full")
    swept = []
    for d0 in d0s:
        done = None if results is None else results.get(sweep_key("S-SLiCS", d0, 0, modes))
        if done is not None:
            swept += done["records"]
            continue
        n_runs += 1
        n_fits += 1
        total += fit_s(d0, "S-SLiCS") + len(split.val) * (2 * t_proj * d0 / d0c + 2 * S * t_vec)
    if d0s and len(swept) == len(d0s) * len(modes):
        d0_table = choose_d0(swept)          # the sweep is finished: its choice is known
    else:
        d0_table = d0s[len(d0s) // 2] if d0s else args.n_atoms  # chosen later: assume a middle one
    pools = ("original",) + (("quantized",) if quantized is not None else ())
    for name, seed in table_runs(methods, tuple(range(args.seeds)), args.batch_size):
        m = get_method(name)
        if needs_message(m, inputs):
            continue
        if results is not None and results.get(table_key(name, d0_table, seed, args.mode, None, pools)) is not None:
            continue
        n_runs += 1
        if name in ("SpLiCE", "F-SpLiCE"):
            unknown.add(name)
        fitted_in_sweep = name == "S-SLiCS" and seed == 0 and d0s
        if not fitted_in_sweep and m.dictionary:
            n_fits += 1
            total += fit_s(d0_table, name)
        total += len(split.query) * len(pools) * ((S if m.filtered else 1) * t_vec + t_proj)
    note = f" (not counting {', '.join(sorted(unknown))})" if unknown else ""
    return total, (f"{n_runs} runs to do ({n_fits} fits of {n_train} x {ed.X.shape[1]}, pool {len(split.pool)})"
                   f"{note}")


def _evaluate(args, ed, split, out_dir, methods, quantized=None):
    """d0 sweep (optional) and methods table; resumable through ``OUT_DIR/runs`` when ``out_dir`` is set."""
    results = ResultStore(_run_folder(out_dir, ed, split, args, quantized)) if out_dir else None
    d0s = list(range(args.sweep[0], args.sweep[1] + 1)) if args.sweep else []
    seconds, what = (None, "") if args.no_estimate else _estimate(ed, split, args, methods, d0s, results, quantized)
    if seconds is not None:
        print(f"estimate: about {_clock(seconds)} of compute for {what}"
              + (f"; finished runs are kept in {results.folder} and reused when the same command is run again"
                 if results is not None else ""), file=sys.stderr)
    started = time.perf_counter()
    state = {"done": 0}
    n_jobs = max(1, len(d0s) + len(table_runs(methods, tuple(range(args.seeds)), args.batch_size)))

    def progress(line):
        if line.startswith("d0=") or " seed " in line:
            state["done"] += 1
        el = time.perf_counter() - started
        print(f"[{state['done']}/{n_jobs} runs, {_clock(el)}] {line}", file=sys.stderr)

    try:
        d0 = args.n_atoms
        if d0s:
            recs = sweep_d0(ed, split, d0s, n_iter=args.n_iter, batch_size=args.batch_size, k=args.k,
                            progress=progress, results=results)
            d0 = choose_d0(recs)
            print(f"chosen d0 = {d0} (best validation sub-label mAP@{args.k})", file=sys.stderr)
            if out_dir:
                os.makedirs(out_dir, exist_ok=True)
                atomic_write_json(os.path.join(out_dir, "d0_sweep.json"), {"records": recs, "chosen_d0": d0},
                                  default=_json_default)
        rows = evaluate_methods(ed, split, methods, n_atoms=d0, n_iter=args.n_iter, batch_size=args.batch_size,
                                seeds=tuple(range(args.seeds)), k=args.k, mode=args.mode,
                                normalization=args.normalization, progress=progress, quantized=quantized,
                                results=results)
    except KeyboardInterrupt:
        if results is not None:
            print(f"interrupted: the finished runs are kept in {results.folder}; run the same command again to "
                  "resume", file=sys.stderr)
        raise
    print(f"compute time: {_clock(time.perf_counter() - started)}", file=sys.stderr)
    _write_table(rows, out_dir, "methods", f"mAP@{args.k} (d0={d0}, AP normalisation: {args.normalization})")
    return rows, d0, results


def _vocab(args, data, store, need):
    """``(words, W)`` for the SpLiCE rows and captions, or None with a message saying why."""
    if not need:
        return None
    try:
        encoder = _cache_encoder(args, data)
        words = get_words(args.vocab, args.n_words)
        return words, vocabulary_embeddings(encoder, words, store=store)
    except (CLIError, ValueError, ImportError, OSError) as exc:
        print(f"evaluate: no vocabulary ({exc}); the SpLiCE rows say so", file=sys.stderr)
        return None


def cmd_evaluate(args):
    methods = _check_eval_args(args)
    data = load_cache(args.cache)
    vocab = _vocab(args, data, EmbeddingStore(args.cache), any(m in ("SpLiCE", "F-SpLiCE") for m in methods))
    ed, split = _prepared(args, data, vocab)
    _evaluate(args, ed, split, args.out_dir, methods, _quantized_pool(args.cache, data, ed, split))
    return 0


def _captions(model, words, W, top):
    Wp = prepare_text_embeddings(np.asarray(W, dtype=np.float64))[0]
    return word_captions(model.atoms_, model.groups_, Wp, words, top_k=top)


def cmd_captions(args):
    check_at_least(args, 1, "--top", "--n-words")
    model = SLiCS.load(args.model)
    data = load_cache(args.cache)
    encoder = _cache_encoder(args, data)
    words = get_words(args.vocab, args.n_words)
    W = vocabulary_embeddings(encoder, words, store=EmbeddingStore(args.cache))
    caps = _captions(model, words, W, args.top)
    lines = ["| Subspace | Word caption |", "|---|---|"]
    lines += [f"| {name} | {', '.join(c)} |" for name, c in zip(model.concept_names_, caps)]
    print("\n".join(lines))
    if args.out:
        atomic_write_json(args.out, dict(zip(model.concept_names_, caps)))
    return 0


def cmd_reproduce(args):
    if not args.encoder and args.dataset != "precomputed":
        raise CLIError("reproduce needs --encoder (optional only with --dataset precomputed)")
    methods = _check_eval_args(args)  # before the output folder is created
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    args.cache = args.cache or str(out / "cache")
    encoder = resolve_encoder(args.encoder, args.device) if args.encoder else None
    store = run_embed(args, encoder)
    data = load_cache(args.cache)
    vocab = None
    if getattr(encoder, "has_text", False):
        words = get_words(args.vocab, args.n_words)
        vocab = (words, vocabulary_embeddings(encoder, words, store=store))
    ed, split = _prepared(args, data, vocab)
    _rows, d0, results = _evaluate(args, ed, split, str(out), methods, _quantized_pool(args.cache, data, ed, split))
    if vocab is not None:  # captions of S-SLiCS fitted on the training split only (the sweep's fit when kept)
        model = results.model("S-SLiCS", d0, 0, lambda: fit_method(
            "S-SLiCS", fit_inputs(ed, split.train), d0, n_iter=args.n_iter, batch_size=args.batch_size, seed=0))
        with writing(out / "s-slics.npz"):
            model.save(out / "s-slics.npz")
        caps = _captions(model, vocab[0], vocab[1], 5)
        atomic_write_json(out / "captions.json", dict(zip(ed.concept_names, caps)))
        print("\n".join(f"{n}: {', '.join(c)}" for n, c in zip(ed.concept_names, caps)))
    print(f"results in {out}")
    return 0


def _add_split_args(p, n_train_default=2000):
    p.add_argument("--n-train", type=int, default=n_train_default,
                   help=f"training set size ({n_train_default or '60%% of the rest'}; paper COCO: 20000)")
    p.add_argument("--n-val", type=int, default=None, help="validation set size (default 500, at most 10%%)")
    p.add_argument("--n-query", type=int, default=None, help="query set size (default 1000, at most 20%%)")
    p.add_argument("--mean-file", default=None,
                   help="precomputed centring mean (.npy/.npz/.pt/.txt; e.g. SpLiCE's CLIP image mean); "
                        "default: the training split's mean")


def _add_eval_args(p, with_sweep=True):
    _add_split_args(p, n_train_default=None)
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--n-atoms", type=int, default=10, help="d0 when no sweep is run (10)")
    p.add_argument("--n-iter", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=None, help="SLiCS mini-batch size (e.g. 2000 for COCO)")
    p.add_argument("--seeds", type=int, default=5, help="seeds for mini-batch runs (5)")
    p.add_argument("--methods", default=None, help="comma-separated methods (default: every registered method: "
                                                   + ", ".join(method_names()) + ")")
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--mode", choices=("partial", "full"), default="partial")
    p.add_argument("--normalization", choices=("retrieved", "min"), default="retrieved",
                   help="AP@k normaliser: relevant items retrieved (default) or min(k, relevant in pool)")
    p.add_argument("--no-estimate", action="store_true",
                   help="start at once, without the compute-time estimate (a timed one-epoch fit and search)")
    if with_sweep:
        p.add_argument("--sweep", type=int, nargs=2, metavar=("LO", "HI"), help="d0 sweep on the validation set")
    p.add_argument("--vocab", default="wordfreq",
                   help="vocabulary: 'wordfreq' (offline default), a word-list file, or 'laion-download'")
    p.add_argument("--n-words", type=int, default=10_000)
    p.add_argument("--out-dir", default=None, required=not with_sweep,
                   help="write methods.csv/.json/.md (and d0_sweep.json) here")


def register(subparsers):
    p = subparsers.add_parser("embed", help="embed a dataset (or import precomputed embeddings) into a resumable cache")
    _add_dataset_args(p)
    _add_embed_args(p)
    p.set_defaults(func=cmd_embed)

    p = subparsers.add_parser("fit", help="fit one method on the training split of a cached dataset")
    p.add_argument("--cache", required=True)
    p.add_argument("--out", required=True, help="model file (.npz)")
    p.add_argument("--method", default="S-SLiCS", choices=method_names(dictionary=True))
    p.add_argument("--n-atoms", type=int, default=10)
    p.add_argument("--n-iter", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--seed", type=int, default=0, help="seed of the split and of mini-batches")
    p.add_argument("--n-active", type=int, default=None, help="concepts per image for U-SLiCS pseudo-labels")
    _add_split_args(p, n_train_default=None)
    p.set_defaults(func=cmd_fit)

    p = subparsers.add_parser("evaluate", help="methods table (mAP@k) on a cached dataset")
    p.add_argument("--cache", required=True)
    p.add_argument("--encoder", default=None, help="text encoder for SpLiCE (default: the cache's encoder)")
    _add_eval_args(p)
    p.set_defaults(func=cmd_evaluate)

    p = subparsers.add_parser("captions", help="top words of every concept subspace")
    p.add_argument("--model", required=True)
    p.add_argument("--cache", required=True, help="cache (for the encoder and the vocabulary cache)")
    p.add_argument("--encoder", default=None)
    p.add_argument("--vocab", default="wordfreq")
    p.add_argument("--n-words", type=int, default=10_000)
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--out", default=None, help="write captions as JSON")
    p.set_defaults(func=cmd_captions)

    p = subparsers.add_parser("reproduce", help="embed -> d0 sweep -> evaluate -> captions in one go")
    _add_dataset_args(p)
    _add_embed_args(p, reproduce=True)
    _add_eval_args(p, with_sweep=False)
    p.add_argument("--sweep", type=int, nargs=2, metavar=("LO", "HI"), default=(5, 20), help="d0 sweep (5 20)")
    p.set_defaults(func=cmd_reproduce)
