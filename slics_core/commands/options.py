"""The options of every ``slics`` sub-command, and the checks that need nothing but them.

:func:`register` builds the sub-command parsers; it imports only light modules (no scikit-learn,
SciPy, pandas, torch), so ``slics --help`` and ``slics COMMAND --help`` answer at once. Names that
live in heavy modules (registered methods, preprocessing kinds, component modes) are checked by
:class:`LazyChoices` only when the option is given or defaults to one. A command's ``check`` (set here with
``set_defaults``) refuses bad values before the module that runs it
(:data:`slics_core.commands.COMMANDS`) is imported: ``slics embed --batch-size 0`` answers
without torch.
"""
from __future__ import annotations

import argparse
import importlib
import os

from slics_core._parallel import N_JOBS_EXPECTED, n_jobs_ok
from slics_core.commands import CLIError, check_at_least
from slics_core.encoders import check_encoder_name
from slics_core.errors import user_message
from slics_core.explorer.workspace_names import check_workspace_name
from slics_core.generators.registry import DEFAULT_CONDITIONING_ENCODER, generator_names_text
from slics_core.tasks import jobs_ok
from slics_core.vocabulary_names import DEFAULT_VOCABULARY, VOCABULARY_SPECS

__all__ = ["LazyChoices", "register", "check_encoder_spec"]


class LazyChoices:
    """An option's ``type=`` that accepts the names ``getattr(module, name)`` holds (called when it is a
    function), read from the heavy ``module`` only when a value other than the option's ``default`` is
    given: ``--help`` and a run with the default import nothing (``choices=`` would be listed by
    ``--help``, so it is not used)."""

    def __init__(self, module: str, name: str, default: str, **kwargs):
        self.module, self.name, self.default, self.kwargs = module, name, default, kwargs
        self.__name__ = name  # argparse names the type in its messages

    def values(self) -> list:
        value = getattr(importlib.import_module(self.module), self.name)
        return list(value(**self.kwargs) if callable(value) else value)

    def __call__(self, text: str) -> str:
        if text == self.default:  # argparse passes the option's default too: taken as given, nothing imported
            return text
        values = self.values()
        if text not in values:
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(values)})")
        return text


_JOBS_HELP = ("worker processes for the independent fits{what} (default: every core, fewer when the estimated peak "
              "memory would pass the memory available, one when the work is too small to pay for starting workers; "
              "the number chosen and why is printed); 1 fits one after another here; the result does not depend "
              "on it")


def add_jobs_option(p, what: str = "") -> None:
    """``--jobs N`` (``slics workspace``, ``emoji-build``, ``emoji-report``, ``evaluate``, ``reproduce``)."""
    p.add_argument("--jobs", type=int, default=None, metavar="N", help=_JOBS_HELP.format(what=what))


def check_jobs(args) -> None:
    """Refuse a ``--jobs`` that :func:`slics_core.tasks.jobs_ok` refuses (before any heavy import)."""
    if not jobs_ok(getattr(args, "jobs", None)):
        raise CLIError(f"--jobs must be a positive number of worker processes, or -1 for every core; got {args.jobs}")


def check_encoder_spec(spec: str | None, option: str = "--encoder") -> None:
    """Refuse an encoder name no encoder form reads (the message lists the forms), an open_clip architecture
    open_clip does not ship, or a checkpoint file or ``local:`` folder that is not there
    (:func:`slics_core.encoders.check_encoder_name`: nothing is imported); None passes."""
    if spec is None:
        return
    try:
        check_encoder_name(spec)
    except (ValueError, FileNotFoundError) as exc:
        raise CLIError(f"{option}: {exc}") from None


# --------------------------------------------------------------------------- data commands
def _add_command(subparsers, name, help, description=None):
    """Sub-command ``name``'s parser: ``help`` is its line in ``slics --help``, ``description`` (default: ``help``)
    opens ``slics NAME --help``."""
    return subparsers.add_parser(name, help=help, description=description or f"{help[0].upper()}{help[1:]}.")


_N_ITER_HELP = "epochs of the iterative methods (S-SLiCS, U-SLiCS; 0: their SVD start) (10)"


def _add_dataset_args(p):
    g = p.add_argument_group("dataset")
    g.add_argument("--dataset", choices=("coco", "mirflickr", "folder", "precomputed", "emoji"), required=True,
                   help="emoji: the app's offline world (sizes scaled by $SLICS_EMOJI_SCALE; its own encoder, "
                        "concept prompts, vocabulary and split unless --encoder, --vocab or sizes are given)")
    g.add_argument("--images", help="image folder (coco, folder; precomputed: where the ids' images are)")
    g.add_argument("--annotations", help="COCO instances_*.json, or the MIRFlickr annotation folder")
    g.add_argument("--root", help="MIRFlickr25K root folder")
    g.add_argument("--labels", help="CSV/JSON label file (folder, precomputed)")
    g.add_argument("--embeddings", help="precomputed: clip-retrieval output folder (img_emb/ + metadata/), "
                                        "a .npy file or a .parquet file with an 'embedding' column")
    g.add_argument("--metadata", help="precomputed .npy: ids of its rows (.parquet, .csv or .txt)")


def _add_embed_args(p, reproduce=False):
    p.add_argument("--encoder", required=False, default=None,
                   help="encoder name (ViT-B-32/openai, emoji-small, ViT-B-32/random@64, local:DIR, module:factory); "
                        "for --dataset precomputed: the encoder that made the embeddings (optional)")
    p.add_argument("--cache", required=not reproduce, default=None,
                   help="embedding cache directory" + (" (default OUT_DIR/cache)" if reproduce else ""))
    p.add_argument("--embed-batch-size" if reproduce else "--batch-size", dest="embed_batch_size", type=int,
                   default=64, help="images per encoder batch (64)")
    kinds = LazyChoices("slics_core.preprocessing", "PREPROCESSING", default="clip")
    p.add_argument("--preprocessing", type=kinds, default=kinds.default, metavar="KIND",
                   help="embedding preprocessing used by fit/evaluate/workspace: clip (default: unit, centre, "
                        "unit), unit, token or none")
    p.add_argument("--workers", type=int, default=None,
                   help="image decoding processes (default: one per core less one, up to 16; "
                        "0 decodes in the main process)")
    p.add_argument("--no-draft", action="store_true",
                   help="decode JPEGs at full size (default: reduced-size JPEG decoding, never below the encoder's "
                        "input size; a cache is always resumed the way it was begun)")
    transfers = LazyChoices("slics_core.embed", "TRANSFERS", default="auto")
    p.add_argument("--transfer", type=transfers, default=transfers.default, metavar="ROUTE",
                   help="what the decoding workers hand to the model: uint8 (decoded, resized pixels), float32 "
                        "(fully preprocessed), jpeg (the file's bytes, decoded on the encoder's device; other files "
                        "fall back to uint8; full-size decoding; local backend only) or auto (default: as the cache "
                        "was begun, else uint8)")
    p.add_argument("--codebook", default=None,
                   help="token codebook (K, token_dim) .npy/.npz of token embeddings (TiTok), stored with the cache so "
                        "that evaluate/reproduce also score the quantized pool (Table 3); a TiTok encoder's own "
                        "codebook is stored without this option")
    p.add_argument("--overwrite", action="store_true", help="discard an existing cache")
    p.add_argument("--device", default=None,
                   help="torch device of the encoder: cpu, cuda, cuda:1, ... (default: cuda when a CUDA GPU is usable, "
                        "else cpu)")
    p.add_argument("--no-progress", action="store_true", help="print no progress bar (the summary only)")
    g = p.add_argument_group("embedding on Ray (pip install \"slics-explorer[ray]\"; docs/scale.md)")
    g.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local (default: this process and its decoding workers) or ray (Ray Data: decoding tasks and "
                        "encoder actors; the same cache, resumable by either backend)")
    g.add_argument("--address", default=None,
                   help="Ray cluster to use (auto, ray://HOST:10001); default: a local Ray started for this run "
                        "(session files under $RAY_TMPDIR when set)")
    g.add_argument("--num-gpus-per-actor", type=float, default=0.0, metavar="G",
                   help="GPUs per encoder actor (default 0: CPU actors)")
    g.add_argument("--concurrency", type=int, default=1, metavar="N", help="encoder actors (default 1)")


#: What each ``--dataset`` reads: the options it needs (with the words of the message when one is missing) and
#: the path options it reads, each a folder (``"dir"``), a file (``"file"``) or either (``"any"``).
_DATASET_NEEDS = {
    "coco": ((("--annotations", "--images"), "--annotations instances_*.json and --images DIR"),
             {"--annotations": "file", "--images": "dir"}),
    "mirflickr": ((("--root",), "--root (folder with mirflickr/ and the annotations)"),
                  {"--root": "dir", "--annotations": "dir"}),
    "folder": ((("--images",), "--images DIR (and --labels FILE.csv|json)"), {"--images": "dir", "--labels": "file"}),
    "precomputed": ((("--embeddings",), "--embeddings (a clip-retrieval folder, .npy or .parquet)"),
                    {"--embeddings": "any", "--metadata": "file", "--labels": "file", "--images": "dir"}),
    "emoji": (((), ""), {}),
}
_KIND_WORDS = {"dir": "folder", "file": "file", "any": "file or folder"}
#: What a file option names, where "a folder, not a file" would not say what to give.
_FILE_WORDS = {"--labels": ("label file", "the labels CSV file")}


def check_path(option: str, value, kind: str = "any", what: str = "") -> None:
    """Refuse an ``option`` whose ``value`` names no folder (``kind="dir"``), no file (``"file"``) or
    nothing (``"any"``), in one line naming the option, the path and ``what`` it should be; ``None`` passes."""
    if value is None:
        return
    path = os.path.expanduser(os.fspath(value))
    want = _KIND_WORDS[kind]
    if not os.path.exists(path):
        raise CLIError(f"{option} {value!r}: no such {want}{what} (check the path, relative to {os.getcwd()!r})")
    if kind == "dir" and not os.path.isdir(path):
        raise CLIError(f"{option} {value!r} is a file, not a folder: give the folder")
    if kind == "file" and os.path.isdir(path):
        noun, give = _FILE_WORDS.get(option, ("file", "the file"))
        raise CLIError(f"{option} {value!r} is a folder, not a {noun}; give {give}")


def check_dataset_paths(args) -> None:
    """``--dataset``'s own options: those it needs are given, and each path it reads exists (before any import)."""
    (needed, words), paths = _DATASET_NEEDS[args.dataset]
    if any(getattr(args, o[2:]) is None for o in needed):
        raise CLIError(f"--dataset {args.dataset} needs {words}")
    for option, kind in paths.items():
        check_path(option, getattr(args, option[2:]), kind)
    if args.dataset not in ("emoji", "precomputed") and not args.encoder:
        raise CLIError(f"--dataset {args.dataset} needs --encoder (e.g. ViT-B-32/openai or emoji-small)")


def _check_embed(args):
    """``embed`` and ``reproduce``: the dataset's options and paths, batch size, workers, the backend's options
    and the encoder's name, before any import of torch, scikit-learn or Ray."""
    if args.backend == "ray" and args.transfer == "jpeg":
        raise CLIError("--transfer jpeg (decoding on the encoder's device) runs on the local backend only: with "
                       "--backend ray leave --transfer out (or give uint8 or float32)")
    option = "--batch-size" if args.command == "embed" else "--embed-batch-size"
    if args.embed_batch_size < 1:
        raise CLIError(f"{option} must be at least 1; got {args.embed_batch_size}")
    check_at_least(args, 0, "--workers", "--num-gpus-per-actor")
    check_at_least(args, 1, "--concurrency")
    if args.backend != "ray":
        given = [o for o, v, d in (("--address", args.address, None), ("--num-gpus-per-actor", args.num_gpus_per_actor,
                                                                        0.0), ("--concurrency", args.concurrency, 1))
                 if v != d]
        if given:
            raise CLIError(f"{', '.join(given)}: only with --backend ray")
    check_encoder_spec(args.encoder)
    check_dataset_paths(args)  # then what it reads
    check_path("--codebook", args.codebook, "file")


def _add_split_args(p):
    p.add_argument("--n-train", type=int, default=None,
                   help="training set size (default 60%% of the rest; paper COCO: 20000)")
    p.add_argument("--n-val", type=int, default=None, help="validation set size (default 500, at most 10%%)")
    p.add_argument("--n-query", type=int, default=None, help="query set size (default 1000, at most 20%%)")
    p.add_argument("--mean-file", default=None,
                   help="precomputed centring mean (.npy/.npz/.pt/.txt; e.g. SpLiCE's CLIP image mean); "
                        "default: the training split's mean")


def _add_eval_args(p, with_sweep=True):
    _add_split_args(p)
    p.add_argument("--split-seed", type=int, default=None, help="seed of the split (0; the emoji world: its own)")
    p.add_argument("--n-atoms", type=int, default=10, help="d0 when no sweep is run (10)")
    p.add_argument("--n-iter", type=int, default=10, help=_N_ITER_HELP)
    p.add_argument("--batch-size", type=int, default=None, help="SLiCS mini-batch size (e.g. 2000 for COCO)")
    p.add_argument("--seeds", type=int, default=5, help="seeds for mini-batch runs (5)")
    p.add_argument("--methods", default=None, help="comma-separated registered methods (default: every one; an "
                                                   "unknown name lists them)")
    p.add_argument("--k", type=int, default=20, help="retrieval depth of mAP@k (20)")
    modes = LazyChoices("slics_core.methods", "MODES", default="partial")
    p.add_argument("--mode", type=modes, default=modes.default, metavar="MODE",
                   help="component mode: partial (default) or full")
    p.add_argument("--normalization", choices=("retrieved", "min"), default="retrieved",
                   help="AP@k normaliser: relevant items retrieved (default) or min(k, relevant in pool)")
    p.add_argument("--stability", type=int, default=None, metavar="N",
                   help="also fit S-SLiCS with N seeds (0..N-1, 2 <= N <= 100) at the table's d0, match each seed's "
                        "atoms to seed 0's (Hungarian on the signed cos, within concept) and print one row per "
                        "concept: mean matched cos and the mAP spread over the seeds; S-SVD and U-SLiCS at the same "
                        "d0 are matched the same way (stability.csv/.json, stability_atoms.csv: one row per atom, "
                        "stability_methods.csv, in --out-dir); the seeds share the S-SVD start and only reorder "
                        "the mini-batches, so seeds matter with --batch-size")
    p.add_argument("--n-active", type=int, nargs="+", default=None, metavar="S",
                   help="also score U-SLiCS fitted with each S~ (concepts per image of its zero-shot pseudo-labels), "
                        "one U-SLiCS row per value, e.g. --n-active 1 2 3 4 (default: only the rounded mean labels "
                        "per training item)")
    p.add_argument("--no-estimate", action="store_true",
                   help="start at once, without the compute-time estimate (a timed one-epoch fit and search)")
    if with_sweep:
        p.add_argument("--sweep", type=int, nargs=2, metavar=("LO", "HI"), help="d0 sweep on the validation set")
    p.add_argument("--vocab", default=None,
                   help=f"vocabulary: {VOCABULARY_SPECS}; not given: the emoji world's own words for its caches, "
                        f"else {DEFAULT_VOCABULARY}")
    p.add_argument("--n-words", type=int, default=10_000, help="words of the vocabulary, most frequent first (10000)")
    p.add_argument("--out-dir", default=None, required=not with_sweep,
                   help="write methods.csv/.json/.md (and d0_sweep.json) here")


def _check_eval(args):
    """``evaluate`` and ``reproduce``: what would give an empty or meaningless table."""
    check_at_least(args, 1, "--seeds", "--k", "--n-atoms", "--n-train", "--n-query", "--n-words", "--batch-size")
    check_at_least(args, 1 if args.sweep else 0, "--n-val")  # the sweep chooses d0 on the validation set
    check_at_least(args, 2, "--stability")  # one seed has nothing to be matched with
    check_path("--mean-file", args.mean_file, "file")
    for value in args.n_active or ():
        if value < 1:
            raise CLIError(f"--n-active values must be at least 1; got {value}")
    if args.sweep and args.sweep[0] > args.sweep[1]:
        raise CLIError(f"--sweep LO HI needs LO <= HI; got {args.sweep[0]} {args.sweep[1]}")
    if args.sweep and args.sweep[0] < 1:
        raise CLIError(f"--sweep values must be positive; got {args.sweep[0]}")


def _check_reproduce(args):
    check_jobs(args)
    _check_embed(args)
    _check_eval(args)


def _check_fit(args):
    check_at_least(args, 1, "--n-atoms", "--n-train", "--n-query", "--batch-size", "--start-size")
    check_at_least(args, 0, "--n-val", "--epochs")
    if args.stream:
        split = [o for o in ("--n-train", "--n-val", "--n-query", "--batch-size")
                 if getattr(args, o[2:].replace("-", "_")) is not None]
        if split:
            raise CLIError(f"--stream fits on every item of the cache, one step per batch file of the cache: leave out "
                           f"{', '.join(split)}")
    else:
        given = [o for o in ("--epochs", "--start-size") if getattr(args, o[2:].replace("-", "_")) is not None]
        if given:
            raise CLIError(f"{' and '.join(given)} {'go' if len(given) > 1 else 'goes'} with --stream (the in-memory "
                           "fit's passes are --n-iter)")
    if not n_jobs_ok(args.n_jobs):
        raise CLIError(f"--n-jobs must be {N_JOBS_EXPECTED}; got {args.n_jobs}")


def _check_evaluate(args):
    check_jobs(args)
    _check_eval(args)
    check_encoder_spec(args.encoder)


def _check_captions(args):
    check_at_least(args, 1, "--top", "--n-words")
    check_encoder_spec(args.encoder)


def _register_data(subparsers):
    p = _add_command(subparsers, "embed",
                     help="embed a dataset (or import precomputed embeddings) into a resumable cache")
    _add_dataset_args(p)
    _add_embed_args(p)
    p.set_defaults(check=_check_embed)

    p = _add_command(subparsers, "fit", help="fit one method on the training split of a cached dataset")
    p.add_argument("--cache", required=True, help="embedding cache directory (from `slics embed`)")
    p.add_argument("--out", required=True, help="model file (.npz)")
    method = LazyChoices("slics_core.methods", "method_names", default="S-SLiCS", dictionary=True)
    p.add_argument("--method", type=method, default=method.default, metavar="METHOD",
                   help="registered dictionary method (default S-SLiCS; an unknown name lists them)")
    p.add_argument("--n-atoms", type=int, default=10, help="atoms per concept, d0 (10)")
    p.add_argument("--n-iter", type=int, default=10, help=_N_ITER_HELP)
    p.add_argument("--batch-size", type=int, default=None,
                   help="SLiCS mini-batch size (default: the whole training split at once)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and of mini-batches")
    p.add_argument("--n-active", type=int, default=None, help="concepts per image for U-SLiCS pseudo-labels")
    p.add_argument("--stream", action="store_true",
                   help="S-SLiCS or U-SLiCS over the cache's batch files with bounded memory (never the whole "
                        "matrix): one pass for the mean and a seeded start sample, then --epochs passes of "
                        "partial_fit, one step per batch file; every item is a training item")
    p.add_argument("--epochs", type=int, default=None,
                   help="--stream: passes over the batches after the start (default 10, the in-memory --n-iter's)")
    p.add_argument("--start-size", type=int, default=None,
                   help="--stream: items of the seeded reservoir sample the fit starts on (default 2000)")
    p.add_argument("--n-jobs", type=int, default=None,
                   help="threads for the fit's per-sample steps (-1: every core; default 1; same model)")
    _add_split_args(p)
    p.set_defaults(check=_check_fit)

    p = _add_command(subparsers, "evaluate", help="methods table (mAP@k) on a cached dataset")
    p.add_argument("--cache", required=True, help="embedding cache directory (from `slics embed`)")
    p.add_argument("--encoder", default=None, help="text encoder for SpLiCE (default: the cache's encoder)")
    _add_eval_args(p)
    add_jobs_option(p, " (the sweep's, the table's dictionaries and the stability seeds; without --out-dir they are "
                       "kept in a temporary folder for the run)")
    p.set_defaults(check=_check_evaluate)

    p = _add_command(subparsers, "captions", help="top words of every concept subspace")
    p.add_argument("--model", required=True, help="model file (.npz) from `slics fit`")
    p.add_argument("--cache", required=True, help="cache (for the encoder and the vocabulary cache)")
    p.add_argument("--encoder", default=None, help="text encoder of the vocabulary (default: the cache's encoder)")
    p.add_argument("--vocab", default=None, help="as for evaluate")
    p.add_argument("--n-words", type=int, default=10_000, help="words of the vocabulary, most frequent first (10000)")
    p.add_argument("--top", type=int, default=5, help="words shown per concept subspace (5)")
    p.add_argument("--out", default=None, help="write captions as JSON")
    p.set_defaults(check=_check_captions)

    p = _add_command(subparsers, "reproduce", help="embed -> d0 sweep -> evaluate -> captions in one go")
    _add_dataset_args(p)
    _add_embed_args(p, reproduce=True)
    _add_eval_args(p, with_sweep=False)
    p.add_argument("--sweep", type=int, nargs=2, metavar=("LO", "HI"), default=(5, 20), help="d0 sweep (5 20)")
    add_jobs_option(p, " (the sweep's, the table's dictionaries and the stability seeds; each is kept in "
                       "OUT_DIR/runs)")
    p.set_defaults(check=_check_reproduce)


# --------------------------------------------------------------------------- workspaces and generators
def add_generator_options(p, *, required=False) -> None:
    """``--generator``, ``--align-encoder``, ``--align-pairs``, ``--align-n`` (``slics workspace``, ``slics align``)."""
    p.add_argument("--generator", default=None, required=required, metavar="SPEC",
                   help=f"image generator of the workspace: {generator_names_text()} (a diffusers pipeline folder); "
                        "sd-1.5 and lcm take the image embedding as the prompt (the paper's route), unclip is "
                        "Stable unCLIP on ViT-L/14 image embeddings")
    p.add_argument("--align-encoder", default=None, metavar="ENCODER",
                   help=f"encoder of the generator's conditioning space (default: the one the workspace's alignment "
                        f"records, else {DEFAULT_CONDITIONING_ENCODER}); it embeds the training images the alignment "
                        "is fitted on")
    p.add_argument("--align-pairs", default=None, metavar="FILE.npz",
                   help="fit the alignment on these pairs instead: arrays 'source' (workspace encoder) and "
                        "'target' (conditioning encoder) of the same images")
    p.add_argument("--align-n", type=int, default=None,
                   help="training images embedded for the alignment (default: up to the library's "
                        "DEFAULT_ALIGN_PAIRS; 20%% held out)")


def _check_generator(args):
    check_at_least(args, 5, "--align-n")
    check_encoder_spec(args.align_encoder, "--align-encoder")
    check_path("--align-pairs", args.align_pairs, "file")


def _check_align(args):
    """``slics align``: one of its two forms, with the files it reads."""
    _check_generator(args)
    if args.workspace is not None:
        if args.source or args.target or args.output:
            raise CLIError("--workspace fits the alignment from the workspace itself: give no SOURCE/TARGET/-o")
        return
    if args.generator or args.align_pairs or args.align_encoder:
        raise CLIError("--generator, --align-encoder and --align-pairs go with --workspace NAME")
    if not (args.source and args.target and args.output):
        raise CLIError("give SOURCE.npy TARGET.npy -o ALIGN.npz, or --workspace NAME --generator SPEC")
    check_path("SOURCE", args.source, "file")
    check_path("TARGET", args.target, "file")


def _check_workspace_name(option, name) -> None:
    try:
        check_workspace_name(name)
    except ValueError as exc:
        raise CLIError(f"{option}: {user_message(exc)}") from None


def add_fit_backend_options(p) -> None:
    """``--backend local|ray`` and ``--address`` of the commands whose fits may run on Ray (``slics workspace``,
    ``slics emoji-build``); :func:`check_fit_backend` checks them."""
    g = p.add_argument_group("fits on Ray (pip install \"slics-explorer[ray]\"; docs/performance.md)")
    g.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local (default: worker processes here) or ray (Ray tasks, the training matrix put once in "
                        "the object store; the same workspace)")
    g.add_argument("--address", default=None,
                   help="Ray cluster to use (auto, ray://HOST:10001); default: a local Ray started for this build")


def check_fit_backend(args) -> None:
    """``--address`` only with ``--backend ray`` (Ray itself is required by the command, after the cheap checks)."""
    if args.backend != "ray" and args.address:
        raise CLIError("--address: only with --backend ray")


def fit_backend(args) -> str:
    """The :func:`slics_core.tasks.run_tasks` backend of ``--backend``: ``ray``, or ``loky`` for local."""
    return "ray" if args.backend == "ray" else "loky"


def _check_workspace(args):
    check_jobs(args)
    check_fit_backend(args)
    if any(d < 1 for d in args.d0):
        raise CLIError(f"--d0 values must be positive; got {args.d0}")
    check_at_least(args, 1, "--n-train", "--n-query", "--n-words", "--n-iter")
    check_at_least(args, 1 if len(set(args.d0)) > 1 else 0, "--n-val")  # the default d0 is chosen on validation
    check_encoder_spec(args.encoder)
    if args.remote_thumbnails and not args.pool_shards:
        raise CLIError("--remote-thumbnails needs --pool-shards DIR (the shards' metadata holds the 'url' column)")
    if args.pool_rerank is not None and not args.pool_shards:
        raise CLIError("--pool-rerank needs --pool-shards DIR (it sets the shards' on-disk index)")
    check_at_least(args, 0, "--pool-rerank")
    _check_generator(args)
    # then what it reads (after the options alone, which answer the same whatever the paths)
    if args.info is None:
        if not args.cache:
            raise CLIError("slics workspace needs --cache DIR (an embedding cache from `slics embed`) or --info NAME")
        if args.name is not None:  # the option alone first, then the path it reads
            _check_workspace_name("--name", args.name)
        check_path("--cache", args.cache, "dir")
        if args.name is None and args.out is None:  # named after the cache's folder
            _check_workspace_name(f"--cache {args.cache!r} (its folder names the workspace; give --name)",
                                  os.path.basename(os.path.abspath(args.cache)))
    check_path("--mean-file", args.mean_file, "file")
    check_path("--pool-shards", args.pool_shards, "dir",
               ", the clip-retrieval output folder holding img_emb/ (img_emb_N.npy) and metadata/")


def _check_emoji(args):
    check_jobs(args)
    check_at_least(args, 1, "--n-train", "--n-val", "--n-query", "--n-pool")
    if args.d0 is not None and min(args.d0) < 1:
        raise CLIError(f"--d0 values must be positive; got {args.d0}")


def _check_emoji_build(args):
    _check_emoji(args)
    check_fit_backend(args)


def _add_emoji(p):
    p.add_argument("--cache-dir", default=None, help="workspace cache root (default $SLICS_EMOJI_CACHE or "
                                                     "~/.cache/slics/emoji)")
    for option, what in (("--n-train", "training"), ("--n-val", "validation"), ("--n-query", "query"),
                         ("--n-pool", "pool")):
        p.add_argument(option, type=int, default=None,
                       help=f"{what} scenes (default: the world's, scaled by $SLICS_EMOJI_SCALE)")
    p.add_argument("--d0", type=int, nargs="+", default=None,
                   help="dictionary sizes to fit (default: the world's); the best on validation is the default")
    p.add_argument("--rebuild", action="store_true", help="build again, ignoring a cached workspace of these sizes")
    add_jobs_option(p, " and the scene rendering")
    p.add_argument("--quiet", action="store_true", help="print no progress (errors and the result only)")
    p.set_defaults(check=_check_emoji)


def _register_workspaces(subparsers) -> None:
    p = _add_command(subparsers, "workspace", help="split, fit every registered method for several d0 and save a "
                                                "workspace the app can open")
    p.add_argument("--cache", default=None, help="embedding cache directory (from `slics embed`)")
    p.add_argument("--name", default=None, help="workspace name: the folder under $SLICS_WORKSPACES (default: the "
                                                "cache folder's name); letters, digits, '.', '_', '-', spaces")
    p.add_argument("--out", default=None, help="write the workspace folder here instead (the app lists only "
                                               "$SLICS_WORKSPACES, i.e. ~/.cache/slics/workspaces)")
    p.add_argument("--overwrite", action="store_true", help="replace a workspace folder built from another cache "
                                                             "(files you added there are kept)")
    p.add_argument("--encoder", default=None, help="text encoder for the vocabulary (default: the cache's encoder)")
    p.add_argument("--d0", type=int, nargs="+", default=[5, 10, 15], help="atoms per concept to fit (5 10 15)")
    p.add_argument("--methods", nargs="+", default=None, help="registered methods to fit (default: all)")
    p.add_argument("--n-iter", type=int, default=10, help=_N_ITER_HELP)
    p.add_argument("--n-train", type=int, default=None, help="training items (default 60%% of the rest)")
    p.add_argument("--n-val", type=int, default=None, help="validation items (default 500, at most 10%%)")
    p.add_argument("--n-query", type=int, default=None, help="query items (default 1000, at most 20%%)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and of mini-batches (0)")
    p.add_argument("--mean-file", default=None, help="precomputed centring mean (default: the training mean)")
    p.add_argument("--vocab", default=DEFAULT_VOCABULARY, help=f"caption vocabulary: {VOCABULARY_SPECS}")
    p.add_argument("--n-words", type=int, default=10_000,
                   help="words of the caption vocabulary, most frequent first (10000)")
    p.add_argument("--info", default=None, metavar="NAME", help="print the summary of an existing workspace")
    p.add_argument("--pool-shards", default=None, metavar="DIR",
                   help="the pool is these clip-retrieval shards (img_emb/img_emb_N.npy + "
                        "metadata/metadata_N.parquet), memory-mapped, never copied; --cache then supplies "
                        "train/val/query")
    p.add_argument("--remote-thumbnails", action="store_true",
                   help="with --pool-shards: thumbnails may be the metadata's http(s) 'url' column, loaded by the "
                        "viewer's browser (off by default; the pages name the hosts)")
    p.add_argument("--pool-rerank", type=int, default=None, metavar="N",
                   help="with --pool-shards large enough for the on-disk index: candidates re-ranked by their exact "
                        "cosine per query (default 1000, growing past 10^6 rows); deeper raises the recall the "
                        "build reports, and each search reads N rows from the shards")
    add_jobs_option(p, " (every method at every d0)")
    add_fit_backend_options(p)
    add_generator_options(p)
    p.add_argument("--quiet", action="store_true", help="print no progress (errors and the summary only)")
    p.set_defaults(check=_check_workspace)

    p = _add_command(
        subparsers, "emoji-build", help="render, embed and fit the offline emoji workspace (cached)",
        description="Build the emoji world's workspace, the one `slics app` opens first, offline: render its scenes, "
                    "embed them with the shipped emoji-small encoder (and emoji-large, the generator's conditioning "
                    "space), embed the caption vocabulary, fit every registered method at each d0, choose the "
                    "default d0 on the validation split and prepare the pages' first views. Each stage is printed "
                    "with its counts, the time it has left and, when it ends, its seconds. The result is cached "
                    "under --cache-dir by its sizes: a second run with the same sizes only opens it (--rebuild "
                    "builds again). Sizes default to the world's, scaled by $SLICS_EMOJI_SCALE (0.2 is the tests' "
                    "small world).")
    _add_emoji(p)
    add_fit_backend_options(p)
    p.set_defaults(check=_check_emoji_build)
    p = _add_command(
        subparsers, "emoji-report", help="quality numbers of the emoji world",
        description="Print the emoji world's quality numbers (zero-shot precision, mAP@20 of every method, the "
                    "chosen d0, the generator's concept accuracy), building the workspace first when it is not "
                    "cached (the options of emoji-build).")
    _add_emoji(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--contact-sheet", default=None, metavar="PNG", help="also write a labelled sheet of random "
                   "query scenes: the scene, its own embedding's image and each concept component's image")
    p.add_argument("--sheet-queries", type=int, default=16, help="query scenes on the contact sheet (16)")
    p.add_argument("--sheet-seed", type=int, default=0, help="seed drawing the contact sheet's queries (0)")


def _register_align(subparsers) -> None:
    a = _add_command(
        subparsers, "align",
        help="fit a Procrustes alignment between two embedding spaces, or give a workspace a generator",
        description="Fit the (semi-)orthogonal map W from source to target embeddings of the same images "
                    "(rows paired), report the mean cosine on held-out pairs, and save it. With --workspace: "
                    "fit the map from that workspace's space into the generator's conditioning space and make "
                    "the generator the workspace's (nothing else is refitted).")
    a.add_argument("source", nargs="?", help=".npy file (n, d_src), e.g. ViT-B/32 embeddings")
    a.add_argument("target", nargs="?", help=".npy file (n, d_dst), e.g. ViT-L/14 embeddings of the same images")
    a.add_argument("-o", "--output", default=None, help="where to write the alignment (.npz)")
    a.add_argument("--test-size", type=float, default=0.2, help="fraction of pairs held out (default 0.2)")
    a.add_argument("--seed", type=int, default=0, help="seed of the held-out pairs and of the alignment's "
                                                        "training images (0)")
    a.add_argument("--no-normalize", action="store_true", help="do not L2-normalise rows before fitting")
    a.add_argument("--source-id", default=None, help="name of the source space saved with the alignment (e.g. the "
                                                     "encoder that made SOURCE)")
    a.add_argument("--target-id", default=None, help="name of the target space saved with the alignment")
    a.add_argument("--workspace", default=None, metavar="NAME",
                   help="a workspace (name under $SLICS_WORKSPACES, or its folder) to give the generator")
    add_generator_options(a)
    a.add_argument("--quiet", action="store_true", help="print no progress (the result only)")
    a.set_defaults(check=_check_align)


# --------------------------------------------------------------------------- models, download, app
def _register_models(subparsers) -> None:
    p = _add_command(
        subparsers, "models", help="list model presets and whether their weights are on disk",
        description="List the model presets (encoders and generators) and whether their weights are on disk. "
                    "Uses no network.")
    p.add_argument("--cache-dir", default=None, help="Hugging Face hub cache to look in (default: the hub's own)")

    d = _add_command(
        subparsers, "download", help="download model weights (with progress)",
        description="Download the weights of one or more presets into the Hugging Face cache, with progress bars. "
                    "Run `slics models` for the names.")
    d.add_argument("names", nargs="*", metavar="MODEL", help="preset name, e.g. ViT-B-32/openai, dinov2-base, sd-1.5")
    d.add_argument("--generator", default=None, metavar="SPEC",
                   help=f"also everything drawing with this generator needs ({generator_names_text()}): its weights "
                        "and its conditioning encoder's")
    d.add_argument("--align-encoder", default=None, metavar="ENCODER",
                   help=f"the generator's conditioning encoder (default {DEFAULT_CONDITIONING_ENCODER})")
    d.add_argument("--workspace", default=None, metavar="NAME",
                   help="also everything the generator of this workspace needs")
    d.add_argument("--dry-run", action="store_true", help="print what would be fetched and fetch nothing")
    d.add_argument("--cache-dir", default=None, help="Hugging Face hub cache to download into")


def _register_app(subparsers) -> None:
    p = _add_command(
        subparsers, "app", help="run the explorer (Streamlit) on the emoji world",
        description="Run the SLiCS explorer (the same pages as `streamlit run app.py` in a checkout). Every "
                    "option after `app` goes to `streamlit run`, e.g. `slics app --server.port 8600 "
                    "--server.headless true`; see `streamlit run --help`.")
    p.add_argument("streamlit_args", nargs=argparse.REMAINDER, metavar="STREAMLIT_OPTION",
                   help="options of `streamlit run` (they override the app's .streamlit/config.toml)")


def register(subparsers) -> None:
    """Add every sub-command's parser to ``subparsers`` (``slics_core.commands.COMMANDS`` runs them)."""
    _register_align(subparsers)
    _register_app(subparsers)
    _register_data(subparsers)
    _register_models(subparsers)
    _register_workspaces(subparsers)
