"""The OpenAI doors: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``; the client's
body is the internal one (validated, never re-dumped)."""
