"""Schedule-tree passes: gpu."""
