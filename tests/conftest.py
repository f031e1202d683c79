"""Shared test set-up. Fixture modules live next to this file and are registered here."""

from __future__ import annotations

import os

from faithtrace._common import safety

# faithtrace's own suite, and only it, runs in strict mode: a faithtrace bug raises where it happens instead
# of being swallowed and counted (what it does in production, and in any app's own test run).
safety.raise_internal_errors = True

# litellm must never try to fetch its price map from the internet during tests (the suite runs offline).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Session-wide fixtures (the real local judge, a real Phoenix). Fake judges are NOT registered here: two fake
# judges with different scripts exist (scoring tests vs tracing tests), so each test module imports the one it
# means by name and no plugin-level fixture can shadow it.
pytest_plugins = ["_judge_fixtures", "_phoenix_fixtures"]
