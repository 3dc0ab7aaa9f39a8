"""Where model weights live, whether they are on disk, and how to fetch them.

Every loader in :mod:`slics_core.encoders` and :mod:`slics_core.generators`
first *resolves* its weights to a local file or folder with :func:`resolve`
and then loads from that local path, so no Hugging Face library ever talks
to the network while loading. The rules are:

* weights already on disk (the Hugging Face cache, the old
  ``~/.cache/clip`` folder of open_clip, or a path the user gives) are used
  as they are;
* weights not on disk are downloaded only when the caller allows it *and*
  the hub is reachable (checked with one short TCP connection, skipped
  entirely when ``HF_HUB_OFFLINE`` is set);
* otherwise :class:`MissingWeightsError` is raised at once, with one sentence
  naming what is missing and the ``slics download ...`` command that
  fetches it. When the network is found to be absent, the hub's offline mode
  is switched on so that nothing later retries for ~50 s.

:func:`download` is the explicit fetch step (``slics download NAME`` on the
command line); it shows ``tqdm`` progress bars, or reports to a ``tqdm``
compatible class given by the caller (e.g. a progress bar in the app).
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from urllib.parse import urlparse

from slics_core.errors import explain
from slics_core.extras import require
from slics_core.formats import read_json

__all__ = [
    "MissingWeightsError",
    "ModelPreset",
    "PRESETS",
    "get_preset",
    "find_preset",
    "list_presets",
    "find_local",
    "is_available",
    "network_available",
    "set_offline_mode",
    "resolve",
    "download",
    "download_patterns",
    "fetch_command",
]

def _assets_dir() -> Path:
    """The shipped assets: package data :mod:`slics_core.assets` (the repository's top-level ``assets/``).

    An installed wheel holds them as ``slics_core/assets``; an editable install maps that package
    to the checkout's ``assets/``. A source checkout used without installing it (``PYTHONPATH``)
    has no such package, and its ``assets/`` beside ``slics_core/`` is used.
    """
    try:
        root = resources.files("slics_core.assets")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "assets"
    if not isinstance(root, Path):  # e.g. zipimport: open_clip and the sprite loader need real folders
        raise RuntimeError(f"slics_core's assets are at {root}, not in a folder: install the package unzipped "
                           "(pip install does).")
    return root


#: The project's shipped assets (emoji sprites and models; see assets/*/NOTICE).
ASSETS_DIR = _assets_dir()
#: Folder of the emoji world's models (``emoji-small``, ``emoji-large``, the generator).
EMOJI_MODELS_DIR = ASSETS_DIR / "models"

#: File names open_clip uses on the Hugging Face hub, best first.
OPEN_CLIP_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")


class MissingWeightsError(FileNotFoundError):
    """Model weights are neither on disk nor downloadable right now.

    A :class:`FileNotFoundError`, so the ``slics`` command line prints it as
    one line; the message names the model and the command that fetches it.
    """


@dataclass(frozen=True)
class ModelPreset:
    """A named set of weights the project knows how to load.

    Parameters
    ----------
    name : str
        Short name used on the command line (``slics download NAME``).
    kind : {"open_clip", "transformers", "diffusers"}
        Which library loads it.
    repo_id : str
        Hugging Face hub repository holding the weights.
    description : str
        Human-readable name used in messages.
    arch : str, optional
        open_clip model (architecture) name, e.g. ``"ViT-B-32"``.
    tag : str, optional
        open_clip pretrained tag, e.g. ``"openai"``.
    files : tuple of str
        For ``open_clip``: candidate weight file names in ``repo_id`` (any
        one is enough). For the others: files that must exist in the
        snapshot folder (besides the weights checked by the loader).
    url : str, optional
        Legacy direct-download URL (open_clip ``openai`` weights; taken from
        open_clip's own table when not given); a copy in ``~/.cache/clip``
        is also accepted.
    quick_gelu : bool
        Whether the open_clip model must use QuickGELU with these weights.
    components : tuple of str
        For ``diffusers``: the pipeline's sub-folders that are loaded; only they (and
        ``model_index.json``) are downloaded and checked, so the single-file checkpoints at the
        top of a repository, the safety checker and fp16/EMA copies are never fetched.
        Empty: every component ``model_index.json`` lists.
    """

    name: str
    kind: str
    repo_id: str
    description: str
    arch: str | None = None
    tag: str | None = None
    files: tuple[str, ...] = field(default_factory=tuple)
    url: str | None = None
    quick_gelu: bool = False
    components: tuple[str, ...] = ()


def _open_clip_preset(name: str, arch: str, tag: str, repo_id: str, url: str) -> ModelPreset:
    return ModelPreset(
        name=name, kind="open_clip", repo_id=repo_id,
        description=f"CLIP {arch} ({tag})", arch=arch, tag=tag,
        files=OPEN_CLIP_FILES, url=url, quick_gelu=True,
    )


#: Where OpenAI published its CLIP weights (open_clip's table; a copy in ``~/.cache/clip`` is used).
#: Written here so that looking a preset up never imports open_clip (and torch).
_OPENAI_CLIP_URL = "https://openaipublic.azureedge.net/clip/models/{}/{}.pt"

#: Sub-folders the generators load (the safety checker and feature extractor of SD 1.5 are not used).
_SD_COMPONENTS = ("unet", "vae", "text_encoder", "tokenizer", "scheduler")
_UNCLIP_COMPONENTS = _SD_COMPONENTS + ("image_encoder", "image_normalizer", "image_noising_scheduler",
                                       "feature_extractor")

#: The presets known to the project (sec. 4 of the paper, plus generators).
PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        _open_clip_preset(
            "RN50/openai", "RN50", "openai", "timm/resnet50_clip.openai",
            _OPENAI_CLIP_URL.format("afeb0e10f9e5a86da6080e35cf09123aca3b358a0c3e3b6c78a7b63bc04b6762", "RN50")),
        _open_clip_preset(
            "ViT-B-32/openai", "ViT-B-32", "openai", "timm/vit_base_patch32_clip_224.openai",
            _OPENAI_CLIP_URL.format("40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af", "ViT-B-32")),
        _open_clip_preset(
            "ViT-L-14/openai", "ViT-L-14", "openai", "timm/vit_large_patch14_clip_224.openai",
            _OPENAI_CLIP_URL.format("b8cca3fd41ae0c99ba7e8951adf17d267cdb84cd88be6f7c2e0eca1737a03836", "ViT-L-14")),
        ModelPreset(
            name="dinov2-base", kind="transformers", repo_id="facebook/dinov2-base",
            description="DINOv2 ViT-B/14", files=("config.json",)),
        ModelPreset(
            name="sd-1.5", kind="diffusers", repo_id="stable-diffusion-v1-5/stable-diffusion-v1-5",
            description="Stable Diffusion 1.5", files=("model_index.json",), components=_SD_COMPONENTS),
        ModelPreset(
            name="lcm-dreamshaper-v7", kind="diffusers", repo_id="SimianLuo/LCM_Dreamshaper_v7",
            description="Latent Consistency Model Dreamshaper v7 (SD 1.5 fine-tune, 4 steps)",
            files=("model_index.json",), components=_SD_COMPONENTS),
        ModelPreset(
            name="sd-2.1-unclip-small", kind="diffusers",
            repo_id="stabilityai/stable-diffusion-2-1-unclip-small",
            description="Stable unCLIP 2.1 small (CLIP ViT-L/14 image embeddings)",
            files=("model_index.json",), components=_UNCLIP_COMPONENTS),
    )
}


def list_presets() -> list[ModelPreset]:
    """All known presets, in a stable order."""
    return list(PRESETS.values())


def get_preset(name: str | ModelPreset) -> ModelPreset:
    """Look up a preset by name (``"ViT-B-32/openai"``) or pass one through.

    open_clip models not in :data:`PRESETS` are accepted as ``"ARCH/TAG"``
    when open_clip knows the pretrained tag and its hub repository.
    """
    if isinstance(name, ModelPreset):
        return name
    if not isinstance(name, str) or not name:
        raise ValueError(f"model name must be a non-empty string, got {name!r}")
    preset = find_preset(name)
    if preset is not None:
        return preset
    if "/" in name:
        arch, tag = name.split("/", 1)
        cfg = _open_clip_pretrained_cfg(arch, tag)
        if cfg and cfg.get("hf_hub"):
            hub = cfg["hf_hub"].rstrip("/")
            repo_id, files = hub, OPEN_CLIP_FILES
            if hub.count("/") >= 2:  # "org/repo/filename"
                repo_id, fname = hub.rsplit("/", 1)
                files = (fname,)
            return ModelPreset(
                name=name, kind="open_clip", repo_id=repo_id,
                description=f"CLIP {arch} ({tag})", arch=arch, tag=tag, files=files,
                url=cfg.get("url") or None, quick_gelu=bool(cfg.get("quick_gelu", False)))
    known = ", ".join(PRESETS)
    raise ValueError(f"unknown model {name!r}; known presets: {known} (or any open_clip ARCH/TAG)")


def find_preset(name: str) -> ModelPreset | None:
    """The preset of :data:`PRESETS` called ``name`` (any case), or None.

    Unlike :func:`get_preset` it never consults open_clip's table of
    pretrained tags, so it never imports open_clip (and torch).
    """
    if not isinstance(name, str):
        return None
    if name in PRESETS:
        return PRESETS[name]
    return {k.lower(): v for k, v in PRESETS.items()}.get(name.lower())


def _open_clip_pretrained_cfg(arch: str, tag: str) -> dict:
    try:
        open_clip = require("open_clip")
    except ImportError:  # pragma: no cover - open_clip is a dependency
        return {}
    try:
        return dict(open_clip.get_pretrained_cfg(arch, tag) or {})
    except Exception:
        return {}


def fetch_command(preset: str | ModelPreset) -> str:
    """The shell command that downloads ``preset``."""
    return f"slics download {get_preset(preset).name}"


# --------------------------------------------------------------------- lookup
def _hub_cache_dir(cache_dir: str | os.PathLike | None) -> str:
    if cache_dir is not None:
        return str(cache_dir)
    constants = require("huggingface_hub.constants")

    return str(constants.HF_HUB_CACHE)


def _clip_url_cache(preset: ModelPreset) -> Path | None:
    url = preset.url
    if not url and preset.arch and preset.tag:
        url = _open_clip_pretrained_cfg(preset.arch, preset.tag).get("url")
    if not url:
        return None
    path = Path(os.path.expanduser("~/.cache/clip")) / os.path.basename(urlparse(url).path)
    return path if path.is_file() else None


def _snapshot_dir(preset: ModelPreset, cache_dir: str) -> Path | None:
    """Snapshot folder of ``preset`` in the hub cache (the one holding its first file), without any network.

    Uses the hub's cache lookup (``try_to_load_from_cache``), which is much
    lighter to import than ``snapshot_download``.
    """
    try_to_load_from_cache = require("huggingface_hub").try_to_load_from_cache

    hit = try_to_load_from_cache(preset.repo_id, preset.files[0], cache_dir=cache_dir)
    if not isinstance(hit, str) or not os.path.isfile(hit):
        return None
    return Path(hit).parent


def _complete_transformers_dir(folder: Path) -> bool:
    has_weights = any((folder / f).is_file() for f in ("model.safetensors", "pytorch_model.bin")) or any(
        folder.glob("model-*.safetensors"))
    return (folder / "config.json").is_file() and has_weights


def _complete_diffusers_dir(folder: Path, components=()) -> bool:
    index = folder / "model_index.json"
    if not index.is_file():
        return False
    try:
        spec = read_json(index, max_bytes=1 << 20)
    except (OSError, ValueError):
        return False
    if not isinstance(spec, dict):
        return False
    for comp, value in spec.items():
        if comp.startswith("_") or not isinstance(value, list) or value[0] is None:
            continue
        if components and comp not in components:
            continue
        sub = folder / comp
        if not sub.is_dir():
            return False
        if comp in ("unet", "vae", "text_encoder", "image_encoder"):
            if not any(sub.glob("*.safetensors")) and not any(sub.glob("*.bin")):
                return False
    return True


def find_local(preset: str | ModelPreset, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """Local path of ``preset``'s weights, or ``None`` when they are not on disk.

    Never touches the network. For ``open_clip`` presets the path is the
    weight file; for ``transformers``/``diffusers`` presets it is the
    snapshot folder (checked to contain a config and weight files).

    Parameters
    ----------
    preset : str or ModelPreset
    cache_dir : path, optional
        Hugging Face hub cache to look in (default: the hub's own default,
        honouring ``HF_HOME``/``HF_HUB_CACHE``).
    """
    preset = get_preset(preset)
    cache = _hub_cache_dir(cache_dir)
    if preset.kind == "open_clip":
        try_to_load_from_cache = require("huggingface_hub").try_to_load_from_cache

        for fname in preset.files:
            hit = try_to_load_from_cache(preset.repo_id, fname, cache_dir=cache)
            if isinstance(hit, str) and os.path.isfile(hit):
                return Path(hit)
        if cache_dir is None:
            return _clip_url_cache(preset)
        return None
    folder = _snapshot_dir(preset, cache)
    if folder is None:
        return None
    ok = (_complete_diffusers_dir(folder, preset.components) if preset.kind == "diffusers"
          else _complete_transformers_dir(folder))
    return folder if ok else None


def is_available(preset: str | ModelPreset, cache_dir: str | os.PathLike | None = None) -> bool:
    """Whether ``preset``'s weights are on disk (no network used)."""
    return find_local(preset, cache_dir) is not None


# -------------------------------------------------------------------- network
_NET_CACHE: dict[str, tuple[float, bool]] = {}


def _hub_offline_flag() -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
        return True
    try:
        constants = require("huggingface_hub.constants")

        return bool(constants.HF_HUB_OFFLINE)
    except Exception:  # pragma: no cover
        return False


def network_available(timeout: float = 1.0, max_age: float = 60.0) -> bool:
    """Whether the Hugging Face hub can be reached.

    Returns ``False`` at once, without any connection attempt, when the hub's
    offline mode is on (``HF_HUB_OFFLINE=1``). Otherwise opens one TCP
    connection to the hub endpoint (port 443) with ``timeout`` seconds; the
    answer is remembered for ``max_age`` seconds.
    """
    if _hub_offline_flag():
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    parsed = urlparse(endpoint)
    host = parsed.hostname or "huggingface.co"
    port = parsed.port or (80 if parsed.scheme == "http" else 443)
    key = f"{host}:{port}"
    now = time.monotonic()
    cached = _NET_CACHE.get(key)
    if cached is not None and now - cached[0] < max_age:
        return cached[1]
    try:
        with socket.create_connection((host, port), timeout=timeout):
            ok = True
    except OSError:
        ok = False
    _NET_CACHE[key] = (now, ok)
    return ok


def set_offline_mode() -> None:
    """Switch the Hugging Face libraries to offline mode for this process."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        constants = require("huggingface_hub.constants")

        constants.HF_HUB_OFFLINE = True
    except Exception:  # pragma: no cover
        pass


def _missing_error(preset: ModelPreset, cache: str, reason: str, offline: bool = True) -> MissingWeightsError:
    where = (" when online (or copy a Hugging Face cache that has them to that folder)"
             if offline else "")
    fix = f"fetch them with `{fetch_command(preset)}`{where}"
    return explain(MissingWeightsError(f"{preset.description} weights ({preset.repo_id}) are not on this machine "
                                       f"(looked in {cache}) and {reason}; {fix}."),
                   f"{preset.description} weights are not on this machine", operator_fix=fix)


def resolve(
    preset: str | ModelPreset,
    cache_dir: str | os.PathLike | None = None,
    allow_download: bool = False,
    tqdm_class=None,
) -> Path:
    """Local path of ``preset``'s weights, downloading only when allowed.

    Parameters
    ----------
    preset : str or ModelPreset
    cache_dir : path, optional
        Hugging Face hub cache (default: the hub's default).
    allow_download : bool, default False
        Download missing weights when the hub is reachable.
    tqdm_class : class, optional
        Progress-bar class passed to the hub download.

    Returns
    -------
    path : pathlib.Path
        Weight file (open_clip) or snapshot folder (transformers, diffusers).

    Raises
    ------
    MissingWeightsError
        Weights not on disk and not downloadable now; raised without any
        network attempt when the hub's offline mode is on.
    """
    preset = get_preset(preset)
    local = find_local(preset, cache_dir)
    if local is not None:  # loaders read local paths only, so the network is not needed
        return local
    cache = _hub_cache_dir(cache_dir)
    if not allow_download:
        if not network_available():
            set_offline_mode()
            raise _missing_error(preset, cache, "no network is reachable")
        raise _missing_error(preset, cache, "downloading was not requested", offline=False)
    if not network_available():
        set_offline_mode()
        raise _missing_error(preset, cache, "no network is reachable")
    return download(preset, cache_dir=cache_dir, tqdm_class=tqdm_class)


#: Never fetched from a diffusers repository: single-file checkpoints, EMA and fp16 copies, safety checker.
_DIFFUSERS_IGNORE = ["*.ckpt", "*ema*", "*.fp16.*", "safety_checker/*"]


def download_patterns(preset: str | ModelPreset) -> list[str]:
    """The file patterns :func:`download` fetches from a ``diffusers`` preset's repository.

    ``model_index.json`` and, in each loaded component folder, its configs, vocabulary files
    and ``*.safetensors`` weights (see :data:`_DIFFUSERS_IGNORE` for what is skipped).
    """
    preset = get_preset(preset)
    if preset.kind != "diffusers":
        raise ValueError(f"{preset.name!r} is not a diffusers pipeline")
    if not preset.components:
        return ["*.json", "*.txt", "*.safetensors"]
    return ["model_index.json"] + [f"{c}/*.{ext}" for c in preset.components for ext in ("json", "txt", "safetensors")]


def download(
    preset: str | ModelPreset,
    cache_dir: str | os.PathLike | None = None,
    tqdm_class=None,
) -> Path:
    """Download ``preset``'s weights into the Hugging Face cache, with progress.

    Parameters
    ----------
    preset : str or ModelPreset
    cache_dir : path, optional
    tqdm_class : class, optional
        ``tqdm``-compatible class for the progress bars (default: tqdm on
        the terminal).

    Returns
    -------
    path : pathlib.Path
        What :func:`find_local` returns afterwards.

    Raises
    ------
    MissingWeightsError
        When the hub cannot be reached (including offline mode).
    """
    preset = get_preset(preset)
    cache = _hub_cache_dir(cache_dir)
    if not network_available():
        fix = f"run `{fetch_command(preset)}` on a connected machine and copy its Hugging Face cache to {cache}"
        raise explain(MissingWeightsError(
            f"Cannot download {preset.description} ({preset.repo_id}): the Hugging Face hub is not reachable "
            f"from here (or HF_HUB_OFFLINE is set); {fix}."),
            f"{preset.description} weights cannot be downloaded here", operator_fix=fix)
    hub = require("huggingface_hub", "downloading weights")

    extra = {"tqdm_class": tqdm_class} if tqdm_class is not None else {}
    last_error: Exception | None = None
    try:
        if preset.kind == "open_clip":
            for fname in preset.files:
                try:
                    hub.hf_hub_download(preset.repo_id, fname, cache_dir=cache, **extra)
                    break
                except Exception as exc:  # try the next file name
                    last_error = exc
        elif preset.kind == "transformers":
            hub.snapshot_download(preset.repo_id, cache_dir=cache,
                              allow_patterns=["*.json", "*.txt", "*.safetensors"], **extra)
        elif preset.kind == "diffusers":
            patterns = download_patterns(preset)
            hub.snapshot_download(preset.repo_id, cache_dir=cache, allow_patterns=patterns,
                              ignore_patterns=_DIFFUSERS_IGNORE, **extra)
        else:  # pragma: no cover - presets are fixed above
            raise ValueError(f"unknown preset kind {preset.kind!r}")
    except OSError as exc:
        last_error = exc
    local = find_local(preset, cache_dir)
    if local is None:
        raise MissingWeightsError(
            f"Downloading {preset.description} ({preset.repo_id}) did not complete: {last_error}")
    return local
