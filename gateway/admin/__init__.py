"""The operators' surfaces: the admin API on FastAPI (:mod:`.router` builds it under ``/admin``
behind the admin token, with its OpenAPI schema; :mod:`.models` its request and answer models;
:mod:`.api`, :mod:`.episodes`, :mod:`.fleet` the routes; :mod:`.dependencies`), the operations
it shares with the console (:mod:`.operations`, :mod:`.changes`), and the ``switchyard``
subcommands (:mod:`.subcommand`, ``*_cli``)."""
