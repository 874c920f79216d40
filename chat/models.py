"""Models arrive with their issue (ingestion, chat)."""
