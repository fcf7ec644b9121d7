"""rcm package."""
