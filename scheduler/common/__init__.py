"""Schedule-tree passes: common."""
