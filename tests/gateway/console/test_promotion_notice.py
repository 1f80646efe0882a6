"""A promotion made in the console is kept as the live release, served again after a restart or
SIGHUP reload while the YAML file's routing is the one it was promoted over: the routing page
says so beside its buttons, and after a promotion shows the promoted ``routing:`` section as YAML
to make it the file's own. Plain HTTP with the bearer token (the browser test clicks the same
buttons)."""

from __future__ import annotations

import html
from urllib.parse import unquote

import httpx
import yaml

from router.config import RoutingConfig
from tests.gateway.console.site import ADMIN_TOKEN, OPERATOR, Site

BEARER = {"authorization": f"Bearer {ADMIN_TOKEN}", "x-switchyard-operator": OPERATOR}


def test_the_routing_page_says_how_long_a_promotion_lasts_and_how_to_keep_it(site: Site) -> None:
    page = httpx.get(site.url + "/ui/routing", headers=BEARER)
    assert page.status_code == 200
    assert 'id="promote-lifetime"' in page.text and "SIGHUP" in page.text
    assert 'id="promoted"' not in page.text  # nothing promoted by this visit

    live = site.gw.state.config.routing
    candidate = live.model_copy(update={"version": "v-notice"}).model_dump_json()
    canary = httpx.post(
        site.url + "/ui/routing/canary",
        data={"candidate": candidate, "share": "0.5"},
        headers=BEARER,
    )
    assert canary.status_code == 303
    with_canary = httpx.get(site.url + "/ui/routing", headers=BEARER).text
    assert 'id="promote"' in with_canary and 'id="promote-lifetime"' in with_canary

    promoted = httpx.post(site.url + "/ui/routing/promote", headers=BEARER)
    assert promoted.status_code == 303
    version = site.gw.state.routing.policy.version
    location = promoted.headers["location"]
    assert location.startswith("/ui/routing?promoted=") and unquote(location).endswith(version)
    after = httpx.get(site.url + location, headers=BEARER)
    assert after.status_code == 200 and 'id="promoted"' in after.text
    assert "live release" in after.text and "serves it again" in after.text
    section = after.text.split('<pre id="promoted-yaml">', 1)[1].split("</pre>", 1)[0]
    written = yaml.safe_load(html.unescape(section))
    assert RoutingConfig.model_validate(written["routing"]) == site.gw.state.config.routing

    stale = httpx.get(site.url + "/ui/routing?promoted=v-other", headers=BEARER)
    assert 'id="promoted"' not in stale.text  # only the live version is announced
