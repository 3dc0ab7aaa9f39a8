"""The one device/dtype rule of encoders and generators (slics_core.torch_device)."""
import pytest
import torch

from slics_core.torch_device import default_device, device_dtype


@pytest.mark.parametrize("cuda", [False, True])
def test_defaults_follow_cuda(monkeypatch, cuda):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert default_device() == ("cuda" if cuda else "cpu")
    device, dtype = device_dtype()
    assert device == torch.device("cuda" if cuda else "cpu")
    assert dtype is (torch.float16 if cuda else torch.float32)


def test_explicit_choices_win(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device_dtype("cpu") == (torch.device("cpu"), torch.float32)
    assert device_dtype("cpu", half=True) == (torch.device("cpu"), torch.float16)
    assert device_dtype("cuda", half=False) == (torch.device("cuda"), torch.float32)
    assert device_dtype(torch.device("cpu"), half=None)[1] is torch.float32


def test_encoders_and_generators_use_it():
    from slics_core.encoders import dinov2, openclip, titok
    from slics_core.generators import image_to_prompt, unclip

    for module in (openclip, dinov2, titok, image_to_prompt, unclip):
        assert module.device_dtype is device_dtype
