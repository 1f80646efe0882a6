"""The Anthropic Messages door: ``/v1/messages`` and ``/v1/messages/count_tokens``, translated to
the internal format (:mod:`.translate`) and rendered back (:mod:`.render`, :mod:`.stream`)."""
