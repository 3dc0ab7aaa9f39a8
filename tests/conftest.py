"""Test configuration shared by every test module.

No network is reachable in tests or CI, so the Hugging Face libraries are put
in offline mode *before* anything imports them (otherwise a missing-weights
load retries for about 47 s).
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
