"""The routing of requests: the one decision (:mod:`.decider`), what it decides by (:mod:`.table`),
the back-ends it sends to (:mod:`.targets`), agent episodes' fallback (:mod:`.episodes`), and the
one reload authority that changes all of it (:mod:`.reload`)."""
