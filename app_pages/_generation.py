"""Drawing with the workspace's generator on the Generate and Mix pages: settings, estimate, progress.

Widget keys: seed, steps, gen_size (sidebar; gen_size only for diffusion pipelines).
"""
import streamlit as st

from app_pages import _safe
from app_pages._errors import visitor_text

_MAX_CACHED = 24
_SIZES = (128, 192, 256, 384, 512, 768)


def settings(gen) -> dict:
    """Sidebar widgets for the sampling settings of ``gen`` (call inside ``st.sidebar``); their values.

    A deterministic generator's seed and steps are shown disabled (they have no effect). A diffusion pipeline
    starts from its device's defaults (``gen.defaults``: few steps and 256 x 256 on a CPU).
    """
    deterministic = gen is not None and gen.deterministic
    defaults = getattr(gen, "defaults", {}) if gen is not None else {}
    seed = st.number_input("Seed", 0, 2**31 - 1, 0, step=1, key="seed", disabled=deterministic)
    steps = st.number_input("Steps", 1, 200, int(defaults.get("steps", 30)), step=1, key="steps",
                            disabled=deterministic)
    out = {"seed": int(seed), "steps": int(steps)}
    if "size" in defaults:
        native = int(gen.info.get("native_size", defaults["size"]))
        sizes = sorted({s for s in _SIZES if s <= 1.5 * native} | {int(defaults["size"]), native})
        out["size"] = int(st.select_slider("Image size (pixels)", sizes, value=int(defaults["size"]), key="gen_size",
                                           help="Side of the square images. The pipeline was trained at 512; on a "
                                                "CPU the default is smaller to keep each image within minutes."))
        sampler = gen.info.get("sampler", "DPM-Solver++")
        st.caption(f"Generator on {gen.info.get('device', 'cpu')}: sampling with {sampler}"
                   + ("; the same seed, steps and size give the same image on a CPU and a GPU." if sampler != "LCM"
                      else " (it adds seeded noise between steps, drawn as diffusers draws it)."))
    if deterministic:
        st.caption(f"The {_safe.text(gen.name)} is deterministic: seed and steps have no effect.")
    return out


def describe_generator(gen) -> str:
    """One line naming the generator and its alignment's quality (held-out cosine when known)."""
    text = f"Generator: {_safe.text(gen.name)}"
    if gen.info.get("alignment_held_out_cosine") is not None:
        text += (f" · alignment into {gen.info.get('conditioning_encoder', 'its conditioning space')}: mean cosine "
                 f"{gen.info['alignment_held_out_cosine']:.2f} on held-out training images")
    elif "alignment_train_cosine" in gen.info:
        text += f" · alignment cosine on training pairs {gen.info['alignment_train_cosine']:.2f}"
    return text


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    return f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds / 60:.1f} min"


def estimate_note(gen, n_images: int, opts: dict) -> str | None:
    """"About N min for K images ..." before a stochastic generator starts (None for a deterministic generator)."""
    secs = gen.estimate_seconds(n_images, opts["steps"], opts.get("size")) if gen is not None else None
    if secs is None:
        return None
    where = "this CPU" if gen.info.get("device", "cpu") == "cpu" else "this GPU"
    return (f"Drawing {n_images} image{'s' if n_images != 1 else ''} ({opts['steps']} steps at "
            f"{opts.get('size')}×{opts.get('size')}) takes about {_duration(secs)} on {where}.")


def draw(gen, rows, titles, opts: dict, cache_key) -> list:
    """Images for ``rows`` (one call per row) with a progress bar per image and one per denoising step;
    remembered per settings in the session. A failure is shown in the page and gives no images."""
    cache = st.session_state.setdefault("_generated", {})
    if cache_key in cache:
        return cache[cache_key]
    bar = st.progress(0.0, text="Generating…")
    step_bar = st.progress(0.0, text="") if gen.defaults else None
    extra = {k: v for k, v in opts.items() if k in gen.defaults and k not in ("steps", "seed")}
    images = []
    try:
        for i, (row, title) in enumerate(zip(rows, titles)):
            bar.progress(i / len(rows), text=f"Generating {title} ({i + 1}/{len(rows)})…")
            if step_bar is not None:
                def on_step(done, total, title=title):
                    step_bar.progress(done / total, text=f"{title}: denoising step {done}/{total}")
                extra["progress"] = on_step
            images.extend(gen.generate(row[None], seed=opts["seed"], steps=opts["steps"], **extra))
    except (ValueError, RuntimeError) as exc:
        st.error(visitor_text(exc, "Generation failed"))
        return []
    finally:
        bar.empty()
        if step_bar is not None:
            step_bar.empty()
    if len(cache) >= _MAX_CACHED:
        cache.pop(next(iter(cache)))
    cache[cache_key] = images
    return images
