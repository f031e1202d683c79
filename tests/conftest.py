"""Shared test set-up. Fixture modules live next to this file and are registered here."""

from __future__ import annotations

import os

# litellm must never try to fetch its price map from the internet during tests (the suite runs offline).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
