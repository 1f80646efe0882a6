"""The ops console: the gateway's traffic, routing, models, flywheel, keys and changes in a
browser, under ``/ui``.

Server-rendered Jinja2 pages (``templates/``) with htmx for the partial updates (a routing
change's replay preview, a weight swap's progress) and Chart.js for the charts; both are bundled
in ``static/vendor`` with their licences (no CDN: the console works offline). Every page is
behind the admin token: a login form exchanges it for a signed, HttpOnly, SameSite=Strict
session cookie, and every write carries the session's CSRF token (:mod:`.session`, :mod:`.web`).

Modules: :mod:`.config` (the ``console:`` settings), :mod:`.web` (guard, context, rendering),
:mod:`.routes` (the routes and the console's long-lived parts), :mod:`.pages` (one module per
page), :mod:`.operations` (the ops levers, shared with the JSON admin API), :mod:`.changes` (the
change log), :mod:`.figures` (raw record or hourly roll-ups, and the roll-up task),
:mod:`.replay_preview`, :mod:`.swap_jobs`, :mod:`.flywheel_runs`, :mod:`.charts`,
:mod:`.synthetic` (seeded traffic) and :mod:`.bench_pages` (the page timings on a store of 1M
inferences).

Imported by ``gateway.config`` for :class:`.config.ConsoleConfig`: this file imports nothing.
"""
