"""Schedule-tree passes: cpu."""
