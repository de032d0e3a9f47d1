"""Shared test helpers (tiny checkpoints, ...), importable as `tests.helpers`."""
