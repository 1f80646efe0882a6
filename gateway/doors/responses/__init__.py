"""The OpenAI Responses door: ``/v1/responses``, translated to the internal format
(:mod:`.request`, :mod:`.translate`) and rendered back (:mod:`.translate`, :mod:`.stream`)."""
