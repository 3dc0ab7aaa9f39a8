"""Train an emoji CLIP-style encoder contrastively on scenes and captions.

Usage (writes ``assets/models/emoji-<size>/``)::

    nice -n 10 python -m slics_core.emoji.training.train_clip --size small
    nice -n 10 python -m slics_core.emoji.training.train_clip --size large
    # the text tower alone, image tower frozen (scene phrases; docs/emoji_world.md):
    nice -n 10 python -m slics_core.emoji.training.train_clip --size small --text-only --init assets/models

Training scenes are ``make_scenes(n_train, seed=TRAIN_SEED)``; they never
overlap the evaluation/workspace scenes (other seeds). Each step pairs a batch
of scenes with one caption variant per scene (:func:`caption_variants`): the
scene caption (categories and supercategories), categories only,
supercategories only, or one supercategory, so both kinds of word are aligned
with the image. Loss (``--loss multi``, default): CLIP's symmetric
cross-entropy where every caption of the batch that is true of an image is a
positive for it (:func:`multi_positive_clip_loss`); ``--loss clip`` is
open_clip's ``ClipLoss`` (only the image's own caption is positive).
Deterministic for a given seed and thread count.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import time

import numpy as np

from slics_core.emoji.catalog import CATEGORY_SUPER, SUPERCATEGORIES
from slics_core.emoji.models import (
    EMOJI_CLIP_CONFIGS,
    create_emoji_clip,
    encode_images,
    images_to_tensor,
    load_emoji_clip,
    model_dir,
    precision_at_2,
    save_emoji_clip,
    zero_shot_scores,
)
from slics_core.emoji.phrases import benchmark_phrases, scene_phrases
from slics_core.emoji.scenes import load_sprites, make_caption, make_scenes, render_scene
from slics_core.extras import require

TRAIN_SEED = 1001
HELDOUT_SEED = 2002  # used only for the progress metric printed during training


def caption_variants(objects, rng: np.random.Generator) -> tuple[list[str], list[set]]:
    """Four captions of one scene and what each one asserts.

    Returns ``(captions, mentions)``: the full caption (categories with their
    supercategories), the categories only, the supercategories only, and one
    supercategory alone ("a picture of animal", the zero-shot prompt's form);
    ``mentions[k]`` is the set of ``"c:<category>"`` / ``"s:<supercategory>"``
    items caption ``k`` says are in the picture.
    """
    full = make_caption(objects, rng)
    cats = list(dict.fromkeys(objects))
    cats = [cats[i] for i in rng.permutation(len(cats))]
    supers = list(dict.fromkeys(CATEGORY_SUPER[c] for c in cats))
    one = supers[int(rng.integers(len(supers)))]

    def join(words):
        return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]

    cat_items = {"c:" + c for c in cats}
    return ([full, "a picture of " + join(cats), "a picture of " + join(supers), "a picture of " + one],
            [cat_items, cat_items, {"s:" + x for x in supers}, {"s:" + one}])


def multi_positive_clip_loss(img_f, txt_f, scale, positive):
    """Symmetric CLIP cross-entropy with every true caption of an image as a positive.

    ``positive[i, j]`` is True when caption ``j`` of the batch is true of image
    ``i`` (everything it mentions is in the picture), e.g. "a picture of animal"
    for every scene with an animal; the targets spread uniformly over them
    (the diagonal is always positive). With only the diagonal positive this is
    open_clip's ``ClipLoss``.
    """
    torch = require("torch")

    logits = scale * img_f @ txt_f.T
    pos = positive.float()
    li = -((pos / pos.sum(1, keepdim=True)) * torch.log_softmax(logits, dim=1)).sum(1).mean()
    lt = -((pos.T / pos.T.sum(1, keepdim=True)) * torch.log_softmax(logits.T, dim=1)).sum(1).mean()
    return 0.5 * (li + lt)


def caption_table(variants, objects, tokenizer):
    """Tokenised captions of every scene and what they assert, for the multi-positive loss.

    ``variants[i]`` is ``(captions, mentions)`` of scene ``i`` (the same number for every scene) and
    ``objects[i]`` its categories. Returns ``(tokens, ids, items, mentions)``: the distinct captions'
    tokens, ``ids[i, k]`` the row of caption ``k`` of scene ``i`` in ``tokens``, ``items[i]`` the
    category / supercategory items present in scene ``i`` and ``mentions[i, k]`` those that caption
    ``k`` asserts (bool tensors over ``"s:"`` supercategories then ``"c:"`` categories).
    """
    torch = require("torch")

    n_var = len(variants[0][0])
    cache: dict[str, int] = {}
    ids = np.empty((len(variants), n_var), dtype=np.int64)
    for i, (caps, _) in enumerate(variants):
        if len(caps) != n_var:
            raise ValueError(f"scene {i} has {len(caps)} captions, scene 0 has {n_var}")
        for k, cap in enumerate(caps):
            ids[i, k] = cache.setdefault(cap, len(cache))
    distinct = list(cache)
    tokens = torch.cat([tokenizer(distinct[i:i + 4096]) for i in range(0, len(distinct), 4096)])
    vocab = {it: k for k, it in enumerate(["s:" + x for x in SUPERCATEGORIES] + ["c:" + c for c in CATEGORY_SUPER])}
    items = torch.zeros((len(variants), len(vocab)), dtype=torch.bool)
    mentions = torch.zeros((len(variants), n_var, len(vocab)), dtype=torch.bool)
    for i, (objs, (_, ments)) in enumerate(zip(objects, variants)):
        for c in objs:
            items[i, vocab["c:" + c]] = items[i, vocab["s:" + CATEGORY_SUPER[c]]] = True
        for k, m in enumerate(ments):
            mentions[i, k, [vocab[x] for x in m]] = True
    return tokens, torch.from_numpy(ids), items, mentions


def positives(items, mentions):
    """``positive[i, j]``: caption ``j`` (its asserted items ``mentions[j]``) is true of scene ``i`` (``items[i]``)."""
    return (mentions.float() @ (~items).float().T).T == 0


def _optimizer(named, args):
    """AdamW over ``[(name, parameter)]`` (no weight decay on embeddings, norms, biases) and the learning
    rate of each step: linear warm-up over ``args.warmup`` of the steps, then cosine to 0."""
    torch = require("torch")

    decay = [p for n, p in named if p.ndim >= 2 and "embedding" not in n]
    no_decay = [p for n, p in named if not (p.ndim >= 2 and "embedding" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.98))
    warm = max(1, int(args.steps * args.warmup))

    def lr_at(step):
        if step < warm:
            return args.lr * (step + 1) / warm
        return 0.5 * args.lr * (1 + math.cos(math.pi * (step - warm) / max(1, args.steps - warm)))

    return opt, lr_at


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Train an emoji CLIP-style encoder.")
    ap.add_argument("--size", choices=sorted(EMOJI_CLIP_CONFIGS), default="small")
    ap.add_argument("--n-train", type=int, default=24000)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=float, default=0.05, help="warm-up fraction of the steps")
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--loss", choices=("clip", "multi"), default="multi",
                    help="clip: open_clip ClipLoss (diagonal positives only); multi: every caption true of "
                         "an image is a positive")
    ap.add_argument("--vision-cfg", default=None,
                    help="JSON replacing the size's open_clip vision_cfg (e.g. a ModifiedResNet one)")
    ap.add_argument("--embed-dim", type=int, default=None, help="replaces the size's embed_dim")
    ap.add_argument("--out", default=None, help="models root (default assets/models)")
    ap.add_argument("--init", default=None,
                    help="models root to continue training from (its emoji-<size> weights)")
    ap.add_argument("--text-only", action="store_true",
                    help="train only the text tower of --init's encoder (image tower and logit scale frozen) on "
                         "a mix of the caption variants and scene phrases (slics_core.emoji.phrases)")
    ap.add_argument("--phrase-share", type=float, default=0.5,
                    help="--text-only: fraction of the caption variants that are scene phrases")
    args = ap.parse_args(argv)
    if args.text_only:
        if not args.init:
            ap.error("--text-only needs --init (the models root whose image tower is kept)")
        return train_text_only(args)

    open_clip = require("open_clip")
    torch = require("torch")
    ClipLoss = require("open_clip.loss").ClipLoss

    model_cfg = json.loads(json.dumps(EMOJI_CLIP_CONFIGS[args.size]))
    if args.vision_cfg:
        model_cfg["vision_cfg"] = json.loads(args.vision_cfg)
    if args.embed_dim:
        model_cfg["embed_dim"] = args.embed_dim
    if args.init:
        init_cfg = json.loads((model_dir(args.size, args.init) / "open_clip_config.json").read_text())
        model_cfg = init_cfg["model_cfg"]

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0 = time.time()
    train = make_scenes(args.n_train, seed=TRAIN_SEED + 100 * args.seed)  # seed 0 -> 1001
    held = make_scenes(500, seed=HELDOUT_SEED)
    print(f"scenes ready in {time.time() - t0:.0f}s", flush=True)

    tokenizer = open_clip.get_tokenizer("ViT-B-32", context_length=model_cfg["text_cfg"]["context_length"])
    rng = np.random.default_rng(args.seed)
    variants = [caption_variants(o, rng) for o in train.objects]
    tok_distinct, ids, items, mentions = caption_table(variants, train.objects, tokenizer)
    print(f"tokenised {ids.numel()} captions ({len(tok_distinct)} distinct) in {time.time() - t0:.0f}s", flush=True)
    n_var = ids.shape[1]

    model = create_emoji_clip(args.size, seed=args.seed, model_cfg=model_cfg)
    previous = []
    if args.init:
        model.load_state_dict(load_emoji_clip(args.size, args.init)[0].state_dict())
        previous = init_cfg.get("training", {}).get("runs", []) + [
            {k: v for k, v in init_cfg.get("training", {}).items() if k not in ("runs", "history")}]
        print(f"continuing from {args.init}", flush=True)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.size}: {n_params / 1e6:.2f}M parameters "
          f"({sum(p.numel() for p in model.visual.parameters()) / 1e6:.2f}M visual)", flush=True)
    opt, lr_at = _optimizer(list(model.named_parameters()), args)
    loss_fn = ClipLoss()
    size = model_cfg["vision_cfg"]["image_size"]
    history = []
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        idx = rng.choice(len(train), size=args.batch_size, replace=False)
        which = torch.from_numpy(rng.integers(0, n_var, size=args.batch_size))
        img = images_to_tensor(train.images[idx], size)
        tidx = torch.from_numpy(idx)
        cid = ids[tidx, which]
        img_f, txt_f, scale = model(img, tok_distinct[cid])
        if args.loss == "multi":
            positive = positives(items[tidx], mentions[tidx, which])  # [i, j]: caption j true of image i
            loss = multi_positive_clip_loss(img_f, txt_f, scale, positive)
        else:
            loss = loss_fn(img_f, txt_f, scale)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            model.eval()
            emb = encode_images(model, held.images)
            p_k, p_2 = precision_at_2(zero_shot_scores(model, tokenizer, emb), held.general)
            model.train()
            history.append({"step": step + 1, "loss": round(float(loss.detach()), 4),
                            "zero_shot_p_at_2": round(p_k, 4), "zero_shot_p_at_2_strict": round(p_2, 4)})
            print(f"step {step + 1} loss {float(loss.detach()):.3f} zs@2 {p_k:.3f} (strict {p_2:.3f}) "
                  f"{time.time() - t0:.0f}s", flush=True)
    model.eval()
    metrics = {"seed": args.seed, "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
               "warmup": args.warmup, "weight_decay": args.weight_decay, "loss": args.loss,
               "n_train": args.n_train, "train_seed": TRAIN_SEED + 100 * args.seed, "heldout_seed": HELDOUT_SEED,
               "threads": args.threads, "parameters": n_params, "seconds": round(time.time() - t0),
               "history": history, "init": args.init, "runs": previous}
    out = save_emoji_clip(model, args.size, args.out, metrics, model_cfg=model_cfg)
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("history", "runs")}))
    print(f"saved to {out}")
    return 0

TEXT_PARAM_PREFIXES = ("token_embedding.", "positional_embedding", "transformer.", "ln_final.", "text_projection")


def text_parameters(model) -> list:
    """``[(name, parameter)]`` of the text tower of an open_clip ``CLIP`` (everything but ``visual.*`` and
    ``logit_scale``/``logit_bias``)."""
    return [(n, p) for n, p in model.named_parameters() if n.startswith(TEXT_PARAM_PREFIXES)]


def visual_digest(model) -> str:
    """sha256 of the image tower's weights as shipped (fp16 bytes of every ``visual.*`` tensor, by name)."""
    h = hashlib.sha256()
    for n, t in sorted(model.state_dict().items()):
        if n.startswith("visual."):
            h.update(n.encode())
            h.update(t.detach().to("cpu").half().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def scene_captions(objects, layout, rng, n_phrases: int, exclude=frozenset()):
    """The text-only training's captions of one scene: :func:`caption_variants` (4) and ``n_phrases``
    scene phrases (:func:`slics_core.emoji.phrases.scene_phrases`), with what each asserts."""
    caps, ments = caption_variants(objects, rng)
    pc, pm = scene_phrases(objects, layout, rng, n=n_phrases, exclude=exclude)
    return caps + pc, ments + pm


def train_text_only(args) -> int:
    """Retrain only the text tower of ``--init``'s encoder against its frozen image embeddings."""
    torch = require("torch")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0, c0 = time.time(), time.process_time()
    init_cfg = json.loads((model_dir(args.size, args.init) / "open_clip_config.json").read_text())
    model_cfg = init_cfg["model_cfg"]
    model, _, tokenizer = load_emoji_clip(args.size, args.init)
    digest0 = visual_digest(model)
    seed = TRAIN_SEED + 100 * args.seed
    sprites = load_sprites()
    rendered = [render_scene(seed, i, 64, sprites, layout=True) for i in range(args.n_train)]
    images = np.stack([r[0] for r in rendered])
    objects = [r[1] for r in rendered]
    held = make_scenes(500, seed=HELDOUT_SEED)
    img_emb = torch.from_numpy(encode_images(model, images))  # frozen: the eval-mode embeddings the app uses
    held_emb = encode_images(model, held.images)
    print(f"{args.n_train} scenes rendered and embedded in {time.time() - t0:.0f}s", flush=True)

    exclude = frozenset(p for p, _, _ in benchmark_phrases())
    n_phr = max(0, round(4 * args.phrase_share / max(1e-9, 1 - args.phrase_share)))
    rng = np.random.default_rng(args.seed)
    variants = [scene_captions(o, lay, rng, n_phr, exclude) for _, o, lay in rendered]
    tok, ids, items, mentions = caption_table(variants, objects, tokenizer)
    leaked = exclude & {c for caps, _ in variants for c in caps}
    if leaked:
        raise RuntimeError(f"benchmark phrases in the training captions: {sorted(leaked)[:3]}")
    print(f"{ids.numel()} captions ({len(tok)} distinct, {n_phr} phrases of {ids.shape[1]} per scene; none of the "
          f"{len(exclude)} benchmark phrases) in {time.time() - t0:.0f}s", flush=True)

    for p in model.parameters():
        p.requires_grad_(False)
    named = text_parameters(model)
    for _, p in named:
        p.requires_grad_(True)
    opt, lr_at = _optimizer(named, args)
    scale = model.logit_scale.exp().detach()
    n_var = ids.shape[1]

    def evaluate(step, loss):
        model.eval()
        p_k, p_2 = precision_at_2(zero_shot_scores(model, tokenizer, held_emb), held.general)
        history.append({"step": step, "loss": None if loss is None else round(loss, 4),
                        "zero_shot_p_at_2": round(p_k, 4), "zero_shot_p_at_2_strict": round(p_2, 4)})
        print(f"step {step} loss {loss if loss is None else round(loss, 3)} zs@2 {p_k:.3f} (strict {p_2:.3f}) "
              f"{time.time() - t0:.0f}s", flush=True)

    history: list = []
    evaluate(0, None)
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        idx = torch.from_numpy(rng.choice(len(objects), size=args.batch_size, replace=False))
        which = torch.from_numpy(rng.integers(0, n_var, size=args.batch_size))
        model.train()
        txt_f = torch.nn.functional.normalize(model.encode_text(tok[ids[idx, which]]), dim=-1)
        loss = multi_positive_clip_loss(img_emb[idx], txt_f, scale, positives(items[idx], mentions[idx, which]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            evaluate(step + 1, float(loss.detach()))
    model.eval()
    if visual_digest(model) != digest0:
        raise RuntimeError("the image tower changed during text-only training")
    previous = init_cfg.get("training", {}).get("runs", []) + [
        {k: v for k, v in init_cfg.get("training", {}).items() if k not in ("runs", "history")}]
    metrics = {"text_only": True, "seed": args.seed, "steps": args.steps, "batch_size": args.batch_size,
               "lr": args.lr, "warmup": args.warmup, "weight_decay": args.weight_decay, "loss": "multi",
               "phrase_share": round(n_phr / (4 + n_phr), 3), "n_train": args.n_train, "train_seed": seed,
               "heldout_seed": HELDOUT_SEED, "threads": args.threads, "visual_digest": digest0,
               "excluded_benchmark_phrases": len(exclude), "seconds": round(time.time() - t0),
               "cpu_seconds": round(time.process_time() - c0), "history": history, "init": args.init,
               "runs": previous}
    out = save_emoji_clip(model, args.size, args.out, metrics, model_cfg=model_cfg)
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("history", "runs")}))
    print(f"saved to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
