"""Schedule-tree passes: tensorcore."""
