"""chat_tui package."""
