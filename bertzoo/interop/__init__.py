"""bertzoo/interop."""
