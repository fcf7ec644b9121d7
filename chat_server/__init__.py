"""chat_server package."""
