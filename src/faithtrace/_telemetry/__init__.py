"""Telemetry: the only code that knows span, event and metric names (see ``names``)."""
