"""Layer 8, experiments: the demo, the sweep runner, one module per paper experiment; imports layers 0-7."""
