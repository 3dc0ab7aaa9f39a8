"""``slics workspace``, ``slics emoji-build``, ``slics emoji-report``: workspaces the app opens.

Every workspace, whatever its source, is built by
:func:`slics_core.explorer.build.build_workspace`; ``--generator`` then adds
an image generator (:func:`slics_core.explorer.generation.attach_generator`).
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

from slics_core import weights
from slics_core.commands import CLIError
from slics_core.commands.data import resolve_encoder
from slics_core.commands.options import fit_backend
from slics_core.emoji.world import config_from_env
from slics_core.encoders import parse_encoder_spec
from slics_core.errors import user_message
from slics_core.explorer.arrival import STORE, prepare_pages
from slics_core.explorer.build import build_workspace_from_cache
from slics_core.explorer.emoji_build import duration_words, open_emoji_workspace
from slics_core.explorer.emoji_report import contact_sheet, emoji_report
from slics_core.explorer.generation import DEFAULT_ALIGN_PAIRS, attach_generator, load_workspace_alignment
from slics_core.explorer.narration import d0_choice
from slics_core.explorer.scoring import pool_index_words
from slics_core.explorer.workspace import check_workspace_name, workspaces_root
from slics_core.explorer.workspace_files import load_workspace, workspace_path
from slics_core.extras import require
from slics_core.generators import DEFAULT_CONDITIONING_ENCODER, missing_presets, parse_generator_spec, required_presets
from slics_core.generators.registry import generator_names_text
from slics_core.methods import method_names
from slics_core.shards import PoolShards

__all__ = ["StageProgress", "add_generator", "check_generator_args", "recorded_conditioning_encoder"]


class StageProgress:
    """``progress(stage, done, total)`` shown stage by stage, with counts and the time left.

    A stage is the text before ``": "`` (``"prepare the pages: atoms"`` is stage ``prepare the pages``; the rest,
    the detail, says where in the stage the work is: ``"fit: model 5 of 22, S-SLiCS d0=10"``). Counts reported
    under one stage move its one bar, whatever their totals. On a terminal with ``tqdm`` installed the bar is
    drawn in place (the detail beside it); otherwise the start of a stage is one line, and while it runs one more
    line at most every :attr:`EVERY` seconds: the detail, or ``done/total`` when there is none, the percentage of
    the stage and, once something is done, an estimate of its time left (the stage's seconds so far, scaled by
    what remains). ``close()`` ends the last bar. With ``timings``, the end of every stage is one more line with
    its wall seconds (``[emoji] render scenes: 12.3 s``), so that one sees where the time goes.
    """

    #: Seconds between two progress lines of one stage on a non-terminal.
    EVERY = 15.0

    def __init__(self, tag: str, *, quiet: bool = False, file=None, timings: bool = False):
        self.tag, self.quiet, self.timings = tag, quiet, timings
        self.file = sys.stderr if file is None else file
        self.stage, self.bar, self.started, self.printed, self.shown = None, None, None, None, None
        isatty = getattr(self.file, "isatty", None)
        self._tqdm = None
        if not quiet and isatty is not None and isatty():
            try:
                tqdm = require("tqdm").tqdm
            except ImportError:
                tqdm = None
            self._tqdm = tqdm

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.quiet:
            return
        label, _, detail = str(stage).partition(": ")
        done, total = int(done), max(int(total), 1)
        now = time.perf_counter()
        if label != self.stage:
            self.close(now)
            self.stage, self.started, self.printed, self.shown = label, now, now, (detail, done)
            if self._tqdm is not None:
                self.bar = self._tqdm(total=total, desc=f"[{self.tag}] {label}", file=self.file, leave=True)
            else:
                print(f"[{self.tag}] {self._line(label, detail, done, total, now, start=True)}", file=self.file,
                      flush=True)
        elif self._tqdm is None and now - self.printed >= self.EVERY and (detail, done) != self.shown:
            self.printed, self.shown = now, (detail, done)
            print(f"[{self.tag}] {self._line(label, detail, done, total, now)}", file=self.file, flush=True)
        if self.bar is not None:
            self.bar.total = total
            self.bar.n = min(done, total)
            if detail:
                self.bar.set_postfix_str(detail, refresh=False)
            self.bar.refresh()

    def _line(self, label, detail, done, total, now, start=False) -> str:
        where = detail if detail else (f"{min(done, total)}/{total}" if total > 1 or done else "")
        if start:
            return f"{label}: {where}" if where else label
        frac = min(1.0, max(0.0, done / total))
        text = f"{label}: {where + ', ' if where else ''}{100 * frac:.0f} %"
        if 0 < frac < 1:
            text += f", about {duration_words((now - self.started) * (1 - frac) / frac)} left"
        return text

    def say(self, line: str) -> None:
        """One line of its own (e.g. the number of jobs chosen), unless quiet."""
        if not self.quiet:
            print(f"[{self.tag}] {line}", file=self.file, flush=True)

    def close(self, now=None) -> None:
        """End the current stage (at ``now``, a ``time.perf_counter()`` reading; default: now)."""
        if self.bar is not None:
            self.bar.close()
        self.bar = None
        if self.timings and self.started is not None:
            self.say(f"{self.stage}: {(time.perf_counter() if now is None else now) - self.started:.1f} s")
        self.started = None


def cmd_workspace(args) -> int:
    if args.info is not None:
        if Path(args.info).is_dir():
            folder = Path(args.info)
        elif "/" in args.info or "\\" in args.info or args.info.startswith("."):
            raise CLIError(f"--info {args.info!r}: no workspace folder there; give a workspace folder or the name of "
                           f"one under {str(workspaces_root())!r}")
        else:
            folder = workspace_path(args.info)
        ws = load_workspace(folder)
        summary = ws.summary()
        if ws.generator and ws.generator != "emoji":
            try:
                align = load_workspace_alignment(ws)
                summary["generator_alignment"] = {"conditioning_encoder": align.target_id,
                                                  "held_out_cosine": align.held_out_cosine_,
                                                  "train_cosine": align.train_cosine_}
            except (OSError, ValueError) as exc:
                summary["generator_alignment"] = f"not usable: {user_message(exc)}"
        print(json.dumps(summary, indent=1))
        return 0
    name = check_workspace_name(args.name) if args.name is not None else None
    out = Path(args.out) if args.out else workspaces_root() / (name or check_workspace_name(
        Path(args.cache).resolve().name))
    if args.methods:
        unknown = [m for m in args.methods if m not in method_names()]
        if unknown:
            raise CLIError(f"unknown method(s) {unknown}; registered: {', '.join(method_names())}")
    generator = check_generator_args(args)
    if args.backend == "ray":
        require("ray", "--backend ray")  # said now, not after the vocabulary is embedded
    encoder = resolve_encoder(args.encoder) if args.encoder else None
    shards = None
    if args.pool_shards:
        try:
            shards = PoolShards(args.pool_shards)
        except (OSError, ValueError) as exc:
            raise CLIError(f"--pool-shards: {user_message(exc)}") from None
    progress = StageProgress("workspace", quiet=args.quiet, timings=True)
    ws = build_workspace_from_cache(args.cache, out, encoder=encoder, mean_file=args.mean_file, vocabulary=args.vocab,
                                    n_words=args.n_words, d0_values=tuple(args.d0), n_iter=args.n_iter,
                                    n_train=args.n_train, n_val=args.n_val, n_query=args.n_query, seed=args.seed,
                                    methods=args.methods, name=args.name, progress=progress, overwrite=args.overwrite,
                                    pool_shards=shards, remote_thumbnails=args.remote_thumbnails,
                                    pool_rerank=args.pool_rerank, n_jobs=args.jobs,
                                    backend=fit_backend(args), address=args.address,
                                    say=progress.say)
    progress.close()
    s = ws.summary()
    print(f"workspace {s['name']!r} written to {out}: {s['n_items']} items, splits {s['splits']}, "
          f"{len(ws.models)} fitted models ({', '.join(ws.methods)}; d0 {s['d0_values']}"
          + (f"; default {d0_choice(ws)}" if ws.d0_values else "") + ")"
          + (f"; not fitted: {', '.join(f'{m} ({why})' for m, why in ws.skipped.items())}" if ws.skipped else ""))
    if ws.sharded:
        info = ws.pool_shards
        print(f"pool: {info['n_rows']} rows in {len(info['counts'])} shards of {info['folder']} (memory-mapped, not "
              f"copied); {len(ws.pool_sample_rows)} sampled for maps; remote thumbnails "
              + ("on" if info["remote_thumbnails"] else "off"))
        print(pool_index_words(ws, ws.pool_index()))
    if generator is not None:
        try:
            add_generator(ws, generator, args)
        except (OSError, ValueError) as exc:
            raise CLIError(f"workspace {s['name']!r} is saved, but its generator was not added: {user_message(exc)} "
                           f"(add it later with `slics align --workspace {out.name} --generator {generator.text}`)") \
                from None
    return 0


def check_generator_args(args):
    """The parsed ``--generator`` (None without one), with what fitting its alignment needs checked first.

    The conditioning encoder's weights must be here (it embeds the training images) unless
    ``--align-pairs`` gives the pairs; the generator's own weights are only needed to draw.
    """
    if not getattr(args, "generator", None):
        for opt in ("align_encoder", "align_pairs"):
            if getattr(args, opt, None):
                raise CLIError(f"--{opt.replace('_', '-')} needs --generator ({generator_names_text()})")
        return None
    generator = parse_generator_spec(args.generator)
    encoder = parse_encoder_spec(args.align_encoder or DEFAULT_CONDITIONING_ENCODER)
    if args.align_pairs is None and encoder.kind == "preset":
        try:
            weights.resolve(encoder.text)
        except weights.MissingWeightsError as exc:
            raise CLIError(f"the alignment embeds the training images with {encoder.text}: {exc}") from None
    return generator


def recorded_conditioning_encoder(ws) -> str | None:
    """The conditioning encoder of the alignment ``ws`` saved (its ``target_id``); None when none is saved.

    Raises ValueError when the saved alignment cannot be read or does not fit ``ws``.
    """
    try:
        return load_workspace_alignment(ws).target_id
    except FileNotFoundError:
        return None


def add_generator(ws, generator, args) -> None:
    """Fit and save the workspace's alignment for ``generator`` and record it; print what was done."""
    align = attach_generator(ws, generator, args.align_encoder, pairs=args.align_pairs,
                             n_pairs=DEFAULT_ALIGN_PAIRS if args.align_n is None else args.align_n,
                             seed=args.seed, progress=(lambda *a: None) if args.quiet else None)
    print(f"generator {generator.text} added to workspace {ws.name!r}: alignment {align.n_features_in_} -> "
          f"{align.n_features_out_} ({align.target_id}), mean cosine {align.held_out_cosine_:.3f} on held-out pairs "
          f"({align.train_cosine_:.3f} on training pairs)")
    n_fit = getattr(align, "n_pairs_", None)
    if n_fit is not None and n_fit < min(align.n_features_in_, align.n_features_out_):
        print(f"warning: {n_fit} pairs fitted a {align.n_features_in_} -> {align.n_features_out_} map, fewer than its "
              "dimension: the alignment is under-determined (see the held-out cosine); use more training images "
              "(--align-n) or a pairs file (--align-pairs)")
    missing = missing_presets(required_presets(generator, align.target_id))
    if missing:
        print(f"to draw, fetch the weights first: `slics download {' '.join(missing)}`")


def emoji_config(args):
    """The world's sizes: :func:`slics_core.emoji.world.config_from_env` (``$SLICS_EMOJI_SCALE``), with the
    sizes given on the command line instead."""
    given = {"n_train": args.n_train, "n_val": args.n_val, "n_query": args.n_query, "n_pool": args.n_pool,
             "d0_values": tuple(args.d0) if args.d0 else None}
    return dataclasses.replace(config_from_env(), **{k: v for k, v in given.items() if v is not None})


def cmd_emoji_build(args) -> int:
    if args.backend == "ray":
        require("ray", "--backend ray")  # said now, not after the scenes are rendered
    prog = StageProgress("emoji", quiet=args.quiet, timings=True)
    started = time.perf_counter()
    ws = open_emoji_workspace(args.cache_dir, emoji_config(args), prog, rebuild=args.rebuild, n_jobs=args.jobs,
                              say=prog.say, backend=fit_backend(args), address=args.address)
    # a world cached before the pages' store existed (or with entries evicted) gets them now; present ones are
    # only read
    prepare_pages(ws, prog)
    prog.close()
    print(f"emoji workspace ready at {ws.path} in {time.perf_counter() - started:.1f} s: {len(ws)} scenes, "
          f"{len(ws.models)} fitted models, default {d0_choice(ws)}; first page views prepared in {ws.path / STORE}")
    return 0


def cmd_emoji_report(args) -> int:
    prog = StageProgress("emoji", quiet=args.quiet)
    ws = open_emoji_workspace(args.cache_dir, emoji_config(args), prog, rebuild=args.rebuild, n_jobs=args.jobs,
                              say=prog.say)
    if args.contact_sheet:
        try:
            contact_sheet(ws, n_queries=args.sheet_queries, seed=args.sheet_seed).save(args.contact_sheet)
        except (OSError, ValueError) as exc:
            raise CLIError(f"could not write the contact sheet {args.contact_sheet}: {exc}") from None
        print(f"contact sheet of {args.sheet_queries} query scenes written to {args.contact_sheet}",
              file=sys.stderr)
    rep = emoji_report(ws, prog)
    prog.close()
    if args.json:
        print(json.dumps(rep, indent=1))
    else:
        for k, v in rep.items():
            print(f"{k}: {v}")
    return 0
