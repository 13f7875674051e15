"""TUI screens."""
