"""Missing weights: found on disk or reported at once, in one sentence, with no network attempt."""
import os
import socket
import time

import pytest
from fixtures_models import fake_hub_file

from slics_core import weights
from slics_core.weights import MissingWeightsError


@pytest.fixture
def no_network(monkeypatch):
    """Record (and refuse) every attempt to open a network connection."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", lambda self, *a: refuse(*a))
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    weights._NET_CACHE.clear()
    yield attempts
    weights._NET_CACHE.clear()


def _one_sentence(msg: str) -> bool:
    body = msg.replace("e.g.", "").rstrip(".")
    return "\n" not in msg and msg.endswith(".") and ". " not in body


def _loaders():
    from slics_core.encoders import DINOv2Encoder, OpenCLIPEncoder
    from slics_core.generators import ImageToPromptSD, UnCLIPGenerator

    return {
        "RN50/openai": lambda c: OpenCLIPEncoder.from_pretrained("RN50", "openai", cache_dir=c),
        "ViT-B-32/openai": lambda c: OpenCLIPEncoder.from_pretrained("ViT-B-32/openai", cache_dir=c),
        "dinov2-base": lambda c: DINOv2Encoder.from_pretrained("facebook/dinov2-base", cache_dir=c),
        "sd-1.5": lambda c: ImageToPromptSD.from_pretrained("sd-1.5", text_projection=None, cache_dir=c),
        "sd-2.1-unclip-small": lambda c: UnCLIPGenerator.from_pretrained(cache_dir=c),
    }


@pytest.mark.parametrize("name", ["RN50/openai", "ViT-B-32/openai", "dinov2-base", "sd-1.5",
                                  "sd-2.1-unclip-small"])
def test_missing_weights_offline_fail_at_once(name, tmp_path, no_network):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # set by conftest
    load = _loaders()[name]
    t0 = time.perf_counter()
    with pytest.raises(MissingWeightsError) as info:
        load(tmp_path)
    elapsed = time.perf_counter() - t0
    msg = str(info.value)
    preset = weights.get_preset(name)
    assert f"`slics download {preset.name}`" in msg
    assert preset.repo_id in msg and str(tmp_path) in msg
    assert "no network is reachable" in msg
    assert _one_sentence(msg), msg
    assert no_network == []  # offline mode: not even a probe
    assert elapsed < 5.0  # loose bound; the real guarantee is "no network attempt" above


def test_missing_with_failed_probe_switches_hub_offline(tmp_path, no_network, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(MissingWeightsError, match="no network is reachable"):
        weights.resolve("ViT-L-14/openai", cache_dir=tmp_path, allow_download=True)
    assert len(no_network) == 1  # exactly one short probe, no retries
    assert os.environ["HF_HUB_OFFLINE"] == "1" and constants.HF_HUB_OFFLINE is True
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_find_local_open_clip_file_in_hub_cache(tmp_path, no_network):
    preset = weights.get_preset("ViT-B-32/openai")
    assert weights.find_local(preset, tmp_path) is None
    target = fake_hub_file(tmp_path, preset.repo_id, "open_clip_pytorch_model.bin", data=b"x")
    assert weights.find_local(preset, tmp_path) == target
    # the safetensors file is preferred when both exist
    safe = fake_hub_file(tmp_path, preset.repo_id, "open_clip_model.safetensors", data=b"y")
    assert weights.resolve(preset, cache_dir=tmp_path) == safe
    assert weights.is_available("ViT-B-32/openai", tmp_path)
    assert not weights.is_available("RN50/openai", tmp_path)
    assert no_network == []


def test_find_local_requires_complete_snapshots(tmp_path):
    fake_hub_file(tmp_path, "facebook/dinov2-base", "config.json", data=b"{}")
    assert weights.find_local("dinov2-base", tmp_path) is None  # config but no weights
    fake_hub_file(tmp_path, "facebook/dinov2-base", "model.safetensors", data=b"w")
    assert weights.find_local("dinov2-base", tmp_path) is not None

    repo = weights.get_preset("sd-1.5").repo_id
    fake_hub_file(tmp_path, repo, "model_index.json",
                  data=b'{"_class_name": "StableDiffusionPipeline", "unet": ["diffusers", "UNet2DConditionModel"],'
                       b' "safety_checker": [null, null]}')
    assert weights.find_local("sd-1.5", tmp_path) is None  # unet folder missing
    fake_hub_file(tmp_path, repo, "unet/config.json", data=b"{}")
    assert weights.find_local("sd-1.5", tmp_path) is None  # unet weights missing
    fake_hub_file(tmp_path, repo, "unet/diffusion_pytorch_model.safetensors", data=b"w")
    assert weights.find_local("sd-1.5", tmp_path) is not None


def test_get_preset_names():
    import open_clip

    assert weights.get_preset("vit-b-32/OPENAI").name == "ViT-B-32/openai"
    p = weights.get_preset("ViT-B-16/laion2b_s34b_b88k")
    cfg = open_clip.get_pretrained_cfg("ViT-B-16", "laion2b_s34b_b88k")
    assert p.kind == "open_clip" and cfg["hf_hub"].startswith(p.repo_id)
    for bad in ["nonsense", "ViT-B-32/no-such-tag", "", None]:
        with pytest.raises(ValueError):
            weights.get_preset(bad)
    assert weights.fetch_command("sd-1.5") == "slics download sd-1.5"


def test_download_fetches_into_cache_with_progress_class(tmp_path, monkeypatch):
    import huggingface_hub

    calls = []

    def fake_download(repo_id, filename, cache_dir=None, **kw):
        calls.append((repo_id, filename, kw))
        if filename != "open_clip_pytorch_model.bin":
            raise huggingface_hub.errors.EntryNotFoundError("no such file")
        return str(fake_hub_file(cache_dir, repo_id, filename, data=b"w"))

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(weights, "network_available", lambda *a, **k: True)

    class Bar:  # stands in for a tqdm-compatible progress class
        pass

    path = weights.resolve("RN50/openai", cache_dir=tmp_path, allow_download=True, tqdm_class=Bar)
    assert path.name == "open_clip_pytorch_model.bin"
    assert [c[1] for c in calls] == ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
    assert all(c[2].get("tqdm_class") is Bar for c in calls)
    # without allow_download a missing model is an error even when online
    with pytest.raises(MissingWeightsError, match="downloading was not requested"):
        weights.resolve("ViT-L-14/openai", cache_dir=tmp_path)


def test_cli_models_and_download(tmp_path, capsys, no_network):
    from slics_core.cli import main

    assert main(["models", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for p in weights.list_presets():
        assert p.name in out
    preset_rows = [ln for ln in out.splitlines()[1:] if not ln.startswith("emoji-")]
    assert preset_rows and all(ln.split()[2] == "no" for ln in preset_rows)

    target = fake_hub_file(tmp_path, weights.get_preset("RN50/openai").repo_id,
                           "open_clip_model.safetensors", data=b"w")
    assert main(["models", "--cache-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if line.startswith("RN50/openai"))
    assert " yes " in row and str(target) in row
    assert lines.index(row) == 4  # usable here: right after the three shipped emoji models

    assert main(["download", "RN50/openai", "--cache-dir", str(tmp_path)]) == 0
    assert "already on disk" in capsys.readouterr().out
    assert main(["download", "dinov2-base", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Cannot download DINOv2" in err and err.count("\n") == 1
    assert main(["download", "no-such-model"]) == 2
    assert no_network == []
