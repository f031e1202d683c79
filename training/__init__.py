"""faithtrace's detector training recipe (not part of the installed package; see training/README.md)."""
