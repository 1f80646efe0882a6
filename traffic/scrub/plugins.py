"""detect-secrets' plugins (Yelp's maintained secret formats) as span detectors.

detect-secrets scans files and reports each secret's value and line, through process-wide
settings. Here each chosen plugin is called directly, with no settings and no network (its
``verify`` is never called), and its findings become spans:

- a regex plugin (``RegexBasedDetector``): each ``denylist`` match that the plugin's own
  ``analyze_string`` accepts; the span is the whole match, or its last group for the plugins
  whose group is the value (``value_group``: the password of ``scheme://user:password@``,
  an AWS secret after its name), less delimiters the pattern includes (quotes, spaces, a
  leading ``=`` or ``:``) and a literal ``trim`` prefix (``AccountKey=``);
- the keyword plugin: each value it reports on the line, located in the line; detect-secrets'
  own false-positive filters are applied first (templated ``{x}``/``<x>``/``${x}`` values,
  ``$VAR``, indirect references such as ``get_secret()``, sequential strings, UUIDs, ids),
  and values with whitespace or only letters are dropped (type annotations, defaults), and
  references to where a secret is kept (``settings.DB_PASSWORD``);
- a plugin runs only on a text holding one of its ``gates`` (lowercase literals every finding
  contains); regex plugins then scan the whole text at once, the keyword plugin only the lines
  holding a gate.

:data:`PLUGIN_RULES` holds every plugin this module can run, by name; which of them the
scrubber uses, and why, is :data:`traffic.scrub.scrubber.LIBRARY_PLUGINS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from detect_secrets.filters import heuristic
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import KeywordDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

from traffic.scrub.rule import secret_reference
from traffic.scrub.rules import Detection

# The keyword plugin picks its patterns by file extension; prompts have none, and this one
# gets the patterns that require quotes except after ``:=`` and in ``name: value`` config
# lines (detect-secrets' YAML set), which is how secrets appear in pasted configs.
_KEYWORD_FILENAME = "prompt.yaml"
# Delimiters some patterns include around the value (``(?:\s|=|:|"|^)AKC...(?:\s|"|$)``).
_LEADING = " \t\"'=:"
_TRAILING = " \t\"'"


def _fixed(kind: str) -> Callable[[str, str], str]:
    return lambda value, before: kind


def _aws_kind(value: str, before: str) -> str:
    return "aws_access_key" if value[:4] in {"AKIA", "ASIA", "ABIA", "ACCA"} else "aws_secret"


def _slack_kind(value: str, before: str) -> str:
    return "slack_webhook" if value.startswith("https://") else "slack_token"


_PASSWORD_NAME = re.compile(r"(?i)(?:pass|pwd|contrase)[\w\"'\]]*\W*$")


def _keyword_kind(value: str, before: str) -> str:
    return "password" if _PASSWORD_NAME.search(before[-48:]) else "generic_secret"


@dataclass(frozen=True)
class PluginRule:
    """One detect-secrets plugin, with what a span of it is."""

    plugin: BasePlugin
    # The kind of a finding, from its value and the line before it.
    kind: Callable[[str, str], str]
    # Lowercase literals, one of which each finding's line holds.
    gates: tuple[str, ...]
    value_group: bool = False
    trim: str = ""
    # A check on the span's text, for patterns that also match code.
    check: Callable[[str], bool] | None = None


PLUGIN_RULES: Mapping[str, PluginRule] = MappingProxyType(
    {
        "aws": PluginRule(
            AWSKeyDetector(), _aws_kind, ("akia", "asia", "abia", "acca", "a3t", "aws"), True
        ),
        "azure_storage": PluginRule(
            AzureStorageKeyDetector(),
            _fixed("azure_storage_key"),
            ("accountkey=",),
            trim="AccountKey=",
        ),
        "basic_auth_url": PluginRule(
            BasicAuthDetector(), _fixed("password_in_url"), ("://",), value_group=True
        ),
        # Its pattern also matches dotted names (``NotificationServiceFactory.create.Abs...``);
        # a token's first part is the bot's id in base64, which holds a digit.
        "discord": PluginRule(
            DiscordBotTokenDetector(),
            _fixed("discord_bot_token"),
            (".",),
            check=lambda value: any(c.isdigit() for c in value.partition(".")[0]),
        ),
        "github": PluginRule(GitHubTokenDetector(), _fixed("github_token"), ("gh",)),
        "gitlab": PluginRule(GitLabTokenDetector(), _fixed("gitlab_token"), ("gl", "gr1348941")),
        "jwt": PluginRule(JwtTokenDetector(), _fixed("jwt"), ("eyj",)),
        "keyword": PluginRule(
            KeywordDetector(), _keyword_kind, ("key", "pass", "pwd", "secret", "contrase")
        ),
        "mailchimp": PluginRule(MailchimpDetector(), _fixed("mailchimp_key"), ("-us",)),
        "npm": PluginRule(NpmDetector(), _fixed("npm_token"), ("_authtoken",), value_group=True),
        "openai": PluginRule(OpenAIDetector(), _fixed("openai_key"), ("t3blbkfj",)),
        "pypi": PluginRule(PypiTokenDetector(), _fixed("pypi_token"), ("pypi-",)),
        "sendgrid": PluginRule(SendGridDetector(), _fixed("sendgrid_key"), ("sg.",)),
        "slack": PluginRule(SlackDetector(), _slack_kind, ("xox", "hooks.slack.com")),
        "square_oauth": PluginRule(SquareOAuthDetector(), _fixed("square_oauth"), ("sq0csp-",)),
        "stripe": PluginRule(StripeDetector(), _fixed("stripe_key"), ("k_live_",)),
        "telegram": PluginRule(TelegramBotTokenDetector(), _fixed("telegram_bot_token"), (":",)),
        "twilio": PluginRule(TwilioKeyDetector(), _fixed("twilio_key"), ("ac", "sk")),
    }
)


def _regex_spans(rule: PluginRule, text: str) -> Iterable[tuple[int, int]]:
    """Spans of ``rule``'s patterns, scanned over the whole text at once (the patterns of
    the chosen plugins match within a line)."""
    assert isinstance(rule.plugin, RegexBasedDetector)
    for regex in rule.plugin.denylist:
        for m in regex.finditer(text):
            if not any(rule.plugin.analyze_string(m.group(0))):
                continue
            groups = [g for g in range(1, (regex.groups or 0) + 1) if m.group(g)]
            start, end = m.span(groups[-1]) if rule.value_group and groups else m.span()
            if rule.trim and text.startswith(rule.trim, start):
                start += len(rule.trim)
            while start < end and text[start] in _LEADING:
                start += 1
            while end > start and text[end - 1] in _TRAILING:
                end -= 1
            if start < end and (rule.check is None or rule.check(text[start:end])):
                yield start, end


def _filtered(value: str, line: str, plugin: BasePlugin) -> bool:
    """detect-secrets' default heuristic filters (``detect_secrets.settings``)."""
    return (
        heuristic.is_templated_secret(value)
        or heuristic.is_prefixed_with_dollar_sign(value)
        or heuristic.is_indirect_reference(line)
        or heuristic.is_sequential_string(value)
        or heuristic.is_potential_uuid(value)
        or heuristic.is_likely_id_string(value, line, plugin)
        or heuristic.is_not_alphanumeric_string(value)
    )


def _credential_shaped(value: str) -> bool:
    """No whitespace, a digit or a symbol, and not a reference: ``name: value`` patterns also
    match type annotations, defaults and attributes (``api_key: SecretStr``,
    ``password_timeout: int = 3600``, ``password = settings.DB_PASSWORD``)."""
    return (
        not any(c.isspace() for c in value) and not value.isalpha() and not secret_reference(value)
    )


def _gated_lines(text: str, lower: str, gates: tuple[str, ...]) -> list[tuple[int, str]]:
    """(start, line) of each line holding a gate; every line when lowercasing moved offsets."""
    if len(lower) != len(text):
        starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    else:
        found: set[int] = set()
        for gate in gates:
            at = lower.find(gate)
            while at != -1:
                found.add(text.rfind("\n", 0, at) + 1)
                line_end = text.find("\n", at)
                at = -1 if line_end == -1 else lower.find(gate, line_end)
        starts = sorted(found)
    lines = []
    for start in starts:
        end = text.find("\n", start)
        lines.append((start, text[start : len(text) if end == -1 else end]))
    return lines


def _value_spans(rule: PluginRule, text: str, lower: str) -> Iterable[tuple[int, int]]:
    """The plugin's values on each line that holds a gate, located in that line."""
    for line_start, line in _gated_lines(text, lower, rule.gates):
        found = rule.plugin.analyze_line(filename=_KEYWORD_FILENAME, line=line, line_number=0)
        for secret in found:
            value = secret.secret_value
            if not value or not _credential_shaped(value) or _filtered(value, line, rule.plugin):
                continue
            at = line.find(value)
            while at != -1:
                yield line_start + at, line_start + at + len(value)
                at = line.find(value, at + 1)


def detect(text: str, names: Iterable[str]) -> list[Detection]:
    """Spans the plugins ``names`` (keys of :data:`PLUGIN_RULES`) find in ``text``."""
    lower = text.lower()
    found: list[Detection] = []
    for name in names:
        rule = PLUGIN_RULES[name]
        if not any(gate in lower for gate in rule.gates):
            continue
        spans = (
            _regex_spans(rule, text)
            if isinstance(rule.plugin, RegexBasedDetector)
            else _value_spans(rule, text, lower)
        )
        for start, end in spans:
            before = text[text.rfind("\n", 0, start) + 1 : start]
            found.append(Detection(start, end, rule.kind(text[start:end], before)))
    return found
