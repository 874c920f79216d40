"""PDF text extraction and OCR, in child processes with a wall-clock timeout and a memory cap."""
