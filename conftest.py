"""Repository-wide pytest plugins (tests/conftest.py holds the test session's own setup)."""

# Tests that need torch skip where it is not installed (the Python 3.12 CI leg).
pytest_plugins = ["tests.needs_torch"]
