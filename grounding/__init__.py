"""Grounding: whether passages carry a question's answer and which of their sentences back a
claim (`evidence`), citations and their verified quotes (`citations`), and the sentence
vectors both rely on (`sentence_vectors`). Shared by chat and guides; below both, above
search (see docs/architecture.md)."""
