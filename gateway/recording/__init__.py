"""How a record leaves the request path: its draft (:mod:`.draft`), the sink the path writes
through (:mod:`.sink`, :mod:`.handle`), the writer process (:mod:`.process`, :mod:`.child`) and
its compiled hot modules (:mod:`.accel`). Measurements: docs/recording.md."""
