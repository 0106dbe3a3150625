"""Schedule-tree passes: promotion."""
