"""Pytest fixtures users can import too (registered as the ``faithtrace`` pytest plugin)."""
