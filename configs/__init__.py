"""Mesh presets and other configuration tables (YAML), installed as jaxeval.configs."""
