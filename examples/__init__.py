"""Runnable examples of the framework adapters; see each module's docstring."""
