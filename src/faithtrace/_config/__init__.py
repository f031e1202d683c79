"""Configuration: the option table and its reader, the option models, ``Settings``, the docs' table.

Below every other layer but ``_common``: the judge and scoring read their settings from here, and nothing here
imports them.
"""
