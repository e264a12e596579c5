"""Small stdlib-only helpers shared by every layer."""
