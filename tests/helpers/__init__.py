"""Test helpers shared by several test modules: tiny models, run configs and data, one module per topic."""
