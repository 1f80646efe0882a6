"""The routing of requests: the one decision (:mod:`.decider`), what it decides by (:mod:`.table`),
the back-ends it sends to (:mod:`.targets`), agent episodes' fallback (:mod:`.episodes`), the
one reload authority that changes all of it (:mod:`.reload`), the promoted routing kept in the
store (:mod:`.release`) and the running canary's sequential test (:mod:`.release_monitor`)."""
