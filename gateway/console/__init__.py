"""The ops console: the gateway's traffic, routing, models, flywheel, keys and changes in a
browser, under ``/ui``.

Server-rendered Jinja2 pages (``templates/``) with htmx for the partial updates (a routing
change's replay preview, a weight swap's progress) and Chart.js for the charts; both are bundled
in ``static/vendor`` with their licences (no CDN: the console works offline). Every page is
behind the admin token: a login form exchanges it for a signed, HttpOnly, SameSite=Strict
session cookie, and every write carries the session's CSRF token (:mod:`.session`, :mod:`.web`).

Modules: :mod:`.web` (guard, context, rendering), :mod:`.routes` (the routes and the console's
long-lived parts), :mod:`.pages` (one module per page), :mod:`.figures` (raw record or hourly
roll-ups, and the roll-up task), :mod:`.windows`, :mod:`.replay_preview`, :mod:`.swap_jobs`,
:mod:`.flywheel_runs`, :mod:`.charts`, :mod:`.session`, :mod:`.synthetic` (seeded traffic; the
page timings on a store of 1M inferences are ``loadtests/bench/console.py``). The ops levers it
shares with the JSON admin API, and the change log, are :mod:`gateway.admin.operations` and
:mod:`gateway.admin.changes`; its settings, ``console:`` in the YAML, are
:class:`gateway.config.ConsoleConfig`.
"""
