"""Reading traces into arrays."""
