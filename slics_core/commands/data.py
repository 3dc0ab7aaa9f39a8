"""Data sub-commands: ``embed``, ``fit``, ``evaluate``, ``captions``, ``reproduce``.

Typical use::

    slics embed --dataset coco --annotations instances_train2017.json --images train2017 \\
        --encoder ViT-B-32/openai --cache cache/coco-vit
    slics fit --cache cache/coco-vit --n-atoms 10 --out coco.npz
    slics evaluate --cache cache/coco-vit --n-train 20000 --batch-size 2000 --out-dir results/
    slics captions --model coco.npz --cache cache/coco-vit --vocab laion.txt
    slics reproduce --dataset mirflickr --root mirflickr25k --encoder ViT-B-32/openai --out-dir run/

``--encoder`` takes a preset of :func:`slics_core.encoders.load_encoder` or
``module:factory`` (a callable returning an encoder object), e.g. your own
encoder.
"""
from __future__ import annotations

import csv
import importlib
import json
import os
import sys
from pathlib import Path

import numpy as np

PREPROCESSING = ("clip", "unit", "token", "none")


# --------------------------------------------------------------------------- helpers
def _cli_error(msg):
    from slics_core.cli import CLIError

    return CLIError(msg)


def resolve_encoder(spec, device=None):
    """Encoder from ``module:factory`` or a preset name of :mod:`slics_core.encoders`."""
    if ":" in spec:
        mod, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(mod)
        except ImportError:
            module = None
        if module is not None:
            factory = getattr(module, attr, None)
            if factory is None:
                raise _cli_error(f"module {mod!r} has no {attr!r}")
            return factory() if callable(factory) else factory
    try:
        from slics_core.encoders import load_encoder
    except ImportError as exc:
        raise _cli_error(f"encoders are not available: {exc}") from None
    try:
        return load_encoder(spec, device=device)
    except (KeyError, OSError, RuntimeError) as exc:
        raise _cli_error(f"cannot load encoder {spec!r}: {exc}") from None


def preprocess(E, kind, n_tokens=32):
    """Embedding preprocessing recorded in the cache.

    ``clip``: unit-normalise, subtract the mean, re-normalise (sec. 4.1);
    ``unit``: unit-normalise; ``token``: unit-normalise each of ``n_tokens``
    tokens (TiTok); ``none``: as is.
    """
    from slics_core.preprocessing import EmbeddingNormalizer, TokenNormalizer, normalize_rows

    E = np.asarray(E, dtype=np.float64)
    if kind == "none":
        return E
    if kind == "token":
        return TokenNormalizer(n_tokens).fit_transform(E)
    if kind == "unit":
        return normalize_rows(E)
    if kind == "clip":
        return EmbeddingNormalizer(center=True).fit_transform(E)
    raise ValueError(f"unknown preprocessing {kind!r}; choose from {PREPROCESSING}.")


def load_dataset(args):
    """The dataset named by ``--dataset`` and its path options."""
    from slics_core import datasets

    kind = args.dataset
    if kind == "coco":
        if not args.annotations or not args.images:
            raise _cli_error("--dataset coco needs --annotations instances_*.json and --images DIR")
        return datasets.load_coco(args.annotations, args.images)
    if kind == "mirflickr":
        if not args.root:
            raise _cli_error("--dataset mirflickr needs --root (folder with mirflickr/ and the annotations)")
        return datasets.load_mirflickr(args.root, args.annotations)
    if kind == "folder":
        if not args.images:
            raise _cli_error("--dataset folder needs --images DIR (and --labels FILE.csv|json)")
        return datasets.load_folder(args.images, args.labels)
    if kind == "emoji":
        try:
            from slics_core.emoji.scenes import make_scenes
        except ImportError as exc:
            raise _cli_error(f"the emoji world is not available: {exc}") from None
        scenes = make_scenes(args.n_images, seed=args.seed)
        ds = datasets.ImageDataset(list(range(len(scenes))), [f"emoji-{args.seed}-{i}" for i in range(len(scenes))],
                                   scenes.general.astype(bool), list(scenes.general_names), scenes.sub.astype(bool),
                                   list(scenes.sub_names), None, name="emoji")
        from slics_core.emoji import catalog

        ds.sub_to_concept = np.array(catalog.SUB_TO_CONCEPT)  # sub_names are the 80 COCO categories, in order
        ds.loader = scenes.pil
        return ds
    raise _cli_error(f"unknown dataset {kind!r}")


def _add_dataset_args(p):
    g = p.add_argument_group("dataset")
    g.add_argument("--dataset", choices=("coco", "mirflickr", "folder", "emoji"), required=True)
    g.add_argument("--images", help="image folder (coco, folder)")
    g.add_argument("--annotations", help="COCO instances_*.json, or the MIRFlickr annotation folder")
    g.add_argument("--root", help="MIRFlickr25K root folder")
    g.add_argument("--labels", help="CSV/JSON label file (folder)")
    g.add_argument("--n-images", type=int, default=4000, help="scenes of the emoji world (default 4000)")
    g.add_argument("--seed", type=int, default=0, help="seed of the emoji world / splits (default 0)")


def _add_embed_args(p, reproduce=False):
    p.add_argument("--encoder", required=True, help="preset name (e.g. ViT-B-32/openai) or module:factory")
    p.add_argument("--cache", required=not reproduce, default=None,
                   help="embedding cache directory" + (" (default OUT_DIR/cache)" if reproduce else ""))
    p.add_argument("--embed-batch-size" if reproduce else "--batch-size", dest="embed_batch_size", type=int,
                   default=64, help="images per encoder batch (64)")
    p.add_argument("--preprocessing", choices=PREPROCESSING, default="clip",
                   help="embedding preprocessing used by fit/evaluate (clip = unit, centre, unit)")
    p.add_argument("--overwrite", action="store_true", help="discard an existing cache")
    p.add_argument("--device", default=None)
    p.add_argument("--no-progress", action="store_true")


def run_embed(args, encoder=None):
    from slics_core.store import embed_dataset

    ds = load_dataset(args)
    if len(ds) == 0:
        raise _cli_error("the dataset has no images")
    encoder = encoder or resolve_encoder(args.encoder, args.device)
    labels = ds.labels_dict() if ds.Y.shape[1] else None
    store, stats = embed_dataset(ds.paths, ds.ids, encoder, args.cache, batch_size=args.embed_batch_size,
                                 preprocessing={"embedding": args.preprocessing},
                                 dataset_info={"name": ds.name, "n": len(ds), "encoder_spec": args.encoder,
                                               "paths": [os.path.abspath(p) if isinstance(p, (str, os.PathLike))
                                                         else None for p in ds.paths]}, labels=labels,
                                 overwrite=args.overwrite, progress=not args.no_progress,
                                 image_loader=getattr(ds, "loader", None))
    if labels is not None and getattr(encoder, "has_text", False):
        try:
            from slics_core.encoders import concept_text_embeddings

            W = concept_text_embeddings(encoder, [c.replace("_", " ") for c in ds.concept_names])
            store.save_array("concept_text", W, names=list(ds.concept_names))
        except (ImportError, NotImplementedError, ValueError) as exc:
            print(f"embed: no concept text embeddings ({exc})", file=sys.stderr)
    for f in store.failed():
        print(f"embed: skipped {f['reason']}", file=sys.stderr)
    print(f"embedded {len(ds) - stats['failed']} of {len(ds)} images into {args.cache} "
          f"({stats['computed']} batches computed, {stats['reused']} reused, {stats['failed']} skipped)")
    return store


def load_eval_data(cache, vocab=None, encoder=None):
    """:class:`EvalData` from a cache (plus optional vocabulary text embeddings)."""
    from slics_core.captions import prepare_text_embeddings
    from slics_core.evaluation import EvalData
    from slics_core.store import EmbeddingStore

    store = EmbeddingStore(cache)
    E, ids, meta = store.load()
    lab = store.load_labels()
    kind = meta.get("preprocessing", {}).get("embedding", "clip")
    X = preprocess(E, kind)
    keep = np.linalg.norm(X, axis=1) > 0
    Z = lab.get("Z")
    data = EvalData(X=X[keep], Y=lab["Y"][keep], concept_names=[str(s) for s in lab["concept_names"]],
                    Z=None if Z is None else Z[keep],
                    sub_to_concept=lab.get("sub_to_concept"),
                    sub_names=[str(s) for s in lab["sub_names"]] if "sub_names" in lab else None,
                    X_raw=E[keep])
    W, _ = store.load_array("concept_text")
    if W is not None:
        data.concept_text = W
    if vocab is not None:
        words, V = vocab
        Vp, mu = prepare_text_embeddings(V)
        data.vocab_text, data.vocab_words = Vp, list(words)
        if W is not None:
            data.concept_text_centered = prepare_text_embeddings(W, mean=mu)[0]
    return data, store, meta


def vocab_embeddings(store, encoder, words, batch_size=256):
    """Text embeddings of ``words``, cached in the store by word-list digest."""
    import hashlib

    digest = hashlib.sha256("\n".join(words).encode()).hexdigest()[:16]
    name = f"vocab-{digest}"
    arr, info = store.load_array(name)
    if arr is not None and info.get("encoder_id") == getattr(encoder, "id", None):
        return arr
    V = np.asarray(encoder.encode_texts(list(words), batch_size=batch_size), dtype=np.float32)
    store.save_array(name, V, encoder_id=getattr(encoder, "id", None), n=len(words))
    return V


def get_words(spec, n_words=10_000, download_to=None):
    from slics_core import captions

    if spec in (None, "wordfreq", "default"):
        try:
            return captions.default_vocabulary(n_words)
        except ImportError as exc:
            raise _cli_error(str(exc)) from None
    if spec == "laion-download":
        dest = download_to or "laion.txt"
        captions.download_laion_vocabulary(dest)
        spec = dest
    return captions.load_laion_vocabulary(spec, n_words)


# --------------------------------------------------------------------------- commands
def cmd_embed(args):
    run_embed(args)
    return 0


def cmd_fit(args):
    from slics_core.slics import SLiCS

    data, store, meta = load_eval_data(args.cache)
    Y = data.Y
    if args.unsupervised:
        if data.concept_text is None:
            raise _cli_error("--unsupervised needs concept text embeddings (embed with a CLIP encoder)")
        from slics_core.unsupervised import zero_shot_labels

        Y = np.asarray(zero_shot_labels(data.X_raw, data.concept_text, n_active=args.n_active,
                                        Y_ref=data.Y if args.n_active is None else None))
    model = SLiCS(n_atoms=args.n_atoms, n_iter=args.n_iter, batch_size=args.batch_size,
                  random_state=args.seed).fit(data.X, Y, concept_names=data.concept_names)
    model.save(args.out)
    print(f"fitted SLiCS ({model.atoms_.shape[0]} atoms, {model.n_concepts_} concepts, {model.n_iter_} epochs, "
          f"final error {model.history_[-1] if len(model.history_) else float('nan'):.4f}) -> {args.out}")
    return 0


def _write_table(rows, out_dir, name, title):
    from slics_core.evaluation import methods_table_markdown, methods_table_rows

    md = methods_table_markdown(rows, title=title)
    print(md)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        flat = methods_table_rows(rows)
        with open(os.path.join(out_dir, f"{name}.csv"), "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(flat[0]))
            w.writeheader()
            w.writerows(flat)
        with open(os.path.join(out_dir, f"{name}.json"), "w") as fh:
            json.dump([{k: v for k, v in r.items()} for r in rows], fh, indent=1, default=_json_default)
        with open(os.path.join(out_dir, f"{name}.md"), "w") as fh:
            fh.write(md + "\n")
    return md


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _evaluate(args, data, out_dir):
    from slics_core.evaluation import choose_d0, evaluate_methods, make_splits, sweep_d0

    split = make_splits(data.Y, args.n_train, args.n_val, args.n_query, random_state=args.split_seed)
    print(f"splits: {split.sizes()}", file=sys.stderr)
    d0 = args.n_atoms
    if args.sweep:
        lo, hi = args.sweep
        recs = sweep_d0(data, split, range(lo, hi + 1), n_iter=args.n_iter, batch_size=args.batch_size,
                        k=args.k, progress=lambda s: print(s, file=sys.stderr))
        d0 = choose_d0(recs)
        print(f"chosen d0 = {d0} (best validation sub-label mAP@{args.k})", file=sys.stderr)
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, "d0_sweep.json"), "w") as fh:
                json.dump({"records": recs, "chosen_d0": d0}, fh, indent=1, default=_json_default)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    rows = evaluate_methods(data, split, methods, n_atoms=d0, n_iter=args.n_iter, batch_size=args.batch_size,
                            seeds=tuple(range(args.seeds)), k=args.k, mode=args.mode,
                            normalization=args.normalization, progress=lambda s: print(s, file=sys.stderr))
    _write_table(rows, out_dir, "methods", f"mAP@{args.k} (d0={d0}, AP normalisation: {args.normalization})")
    return rows, d0


def _maybe_vocab(args, store, meta, need):
    if not need:
        return None, None
    try:
        encoder = resolve_encoder(args.encoder or meta["encoder_id"], getattr(args, "device", None))
    except Exception as exc:  # no weights offline etc.: SpLiCE rows are skipped
        print(f"no text encoder for the vocabulary ({exc}); SpLiCE baselines skipped", file=sys.stderr)
        return None, None
    if not getattr(encoder, "has_text", False):
        return None, encoder
    words = get_words(args.vocab, args.n_words)
    return (words, vocab_embeddings(store, encoder, words)), encoder


def cmd_evaluate(args):
    from slics_core.store import EmbeddingStore

    meta = EmbeddingStore(args.cache).meta()
    need_vocab = any(m in args.methods for m in ("SpLiCE",))
    vocab, _ = _maybe_vocab(args, EmbeddingStore(args.cache), meta, need_vocab)
    data, _, _ = load_eval_data(args.cache, vocab)
    _evaluate(args, data, args.out_dir)
    return 0


def cmd_captions(args):
    from slics_core.captions import prepare_text_embeddings, word_captions
    from slics_core.slics import SLiCS
    from slics_core.store import EmbeddingStore

    model = SLiCS.load(args.model)
    store = EmbeddingStore(args.cache)
    meta = store.meta()
    encoder = resolve_encoder(args.encoder or meta["encoder_id"], getattr(args, "device", None))
    if not getattr(encoder, "has_text", False):
        raise _cli_error(f"encoder {getattr(encoder, 'id', '?')!r} has no text encoder; captions need CLIP")
    words = get_words(args.vocab, args.n_words)
    W = prepare_text_embeddings(vocab_embeddings(store, encoder, words))[0]
    caps = word_captions(model.atoms_, model.groups_, W, words, top_k=args.top)
    lines = ["| Subspace | Word caption |", "|---|---|"]
    lines += [f"| {name} | {', '.join(c)} |" for name, c in zip(model.concept_names_, caps)]
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(dict(zip(model.concept_names_, caps)), fh, indent=1)
    return 0


def cmd_reproduce(args):
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    args.cache = args.cache or str(out / "cache")
    encoder = resolve_encoder(args.encoder, args.device)
    store = run_embed(args, encoder)
    vocab = None
    if getattr(encoder, "has_text", False):
        words = get_words(args.vocab, args.n_words)
        vocab = (words, vocab_embeddings(store, encoder, words))
    data, _, _ = load_eval_data(args.cache, vocab)
    args.sweep = args.sweep or (5, 20)
    rows, d0 = _evaluate(args, data, str(out))
    if vocab is not None:
        from slics_core.captions import prepare_text_embeddings, word_captions
        from slics_core.slics import SLiCS

        model = SLiCS(n_atoms=d0, n_iter=args.n_iter, batch_size=args.batch_size, random_state=0)
        model.fit(data.X, data.Y, concept_names=data.concept_names)
        model.save(out / "s-slics.npz")
        caps = word_captions(model.atoms_, model.groups_, prepare_text_embeddings(vocab[1])[0], vocab[0])
        with open(out / "captions.json", "w") as fh:
            json.dump(dict(zip(data.concept_names, caps)), fh, indent=1)
        print("\n".join(f"{n}: {', '.join(c)}" for n, c in zip(data.concept_names, caps)))
    print(f"results in {out}")
    return 0


def _add_eval_args(p, with_sweep=True):
    p.add_argument("--n-train", type=int, default=2000, help="training set size (2000; paper COCO: 20000)")
    p.add_argument("--n-val", type=int, default=500)
    p.add_argument("--n-query", type=int, default=1000)
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--n-atoms", type=int, default=10, help="d0 when no sweep is run (10)")
    p.add_argument("--n-iter", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=None, help="SLiCS mini-batch size (e.g. 2000 for COCO)")
    p.add_argument("--seeds", type=int, default=5, help="seeds for mini-batch runs (5)")
    p.add_argument("--methods", default="S-SVD,S-SLiCS,U-SLiCS,UF,F-SpLiCE,SpLiCE")
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--mode", choices=("partial", "full"), default="partial")
    p.add_argument("--normalization", choices=("retrieved", "min"), default="retrieved",
                   help="AP@k normaliser: relevant items retrieved (default) or min(k, relevant in pool)")
    if with_sweep:
        p.add_argument("--sweep", type=int, nargs=2, metavar=("LO", "HI"), help="d0 sweep on the validation set")
    p.add_argument("--vocab", default="wordfreq",
                   help="vocabulary: 'wordfreq' (offline default), a LAION word-list file, or 'laion-download'")
    p.add_argument("--n-words", type=int, default=10_000)
    p.add_argument("--out-dir", default=None, required=not with_sweep,
                   help="write methods.csv/.json/.md (and d0_sweep.json) here")


def register(subparsers):
    p = subparsers.add_parser("embed", help="embed a dataset into a resumable cache directory")
    _add_dataset_args(p)
    _add_embed_args(p)
    p.set_defaults(func=cmd_embed)

    p = subparsers.add_parser("fit", help="fit SLiCS on a cached dataset")
    p.add_argument("--cache", required=True)
    p.add_argument("--out", required=True, help="model file (.npz)")
    p.add_argument("--n-atoms", type=int, default=10)
    p.add_argument("--n-iter", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--unsupervised", action="store_true", help="zero-shot pseudo-labels (U-SLiCS)")
    p.add_argument("--n-active", type=int, default=None)
    p.set_defaults(func=cmd_fit)

    p = subparsers.add_parser("evaluate", help="methods table (mAP@k) on a cached dataset")
    p.add_argument("--cache", required=True)
    p.add_argument("--encoder", default=None, help="text encoder for SpLiCE (default: the cache's encoder)")
    _add_eval_args(p)
    p.set_defaults(func=cmd_evaluate)

    p = subparsers.add_parser("captions", help="top words of every concept subspace")
    p.add_argument("--model", required=True)
    p.add_argument("--cache", required=True, help="cache (for the encoder id and the vocabulary cache)")
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
