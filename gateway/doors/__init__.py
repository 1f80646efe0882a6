"""The inference doors: the skeleton every door runs (:mod:`.skeleton`), the way to a back-end
with failover (:mod:`.pipeline`), one request while served (:mod:`.exchange`) and its end
(:mod:`.finish`); each door's handler beside its wire translation (:mod:`.openai`,
:mod:`.anthropic`, :mod:`.responses`); feedback (:mod:`.feedback`) and shadows (:mod:`.shadow`)."""
