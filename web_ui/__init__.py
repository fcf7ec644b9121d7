"""web_ui package."""
