"""The operators' surfaces: the admin API (:mod:`.api`, :mod:`.episodes`, :mod:`.fleet`), the
operations it shares with the console (:mod:`.operations`, :mod:`.changes`), and the
``switchyard`` subcommands (:mod:`.subcommand`, ``*_cli``)."""
