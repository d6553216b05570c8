"""Experiments: the embedded demo, the sweep runner and one module per paper experiment."""
