"""The Textual TUI (`kanalyze tui`). Imported only by that command: the core never imports
textual."""
