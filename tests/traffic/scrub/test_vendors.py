"""Secrets known by their shape (traffic.scrub.vendors): vendor formats, webhook URLs, signed
URLs, base64 private keys and passwords in user-less connection strings; their public
lookalikes survive the whole scrubber."""

from __future__ import annotations

import base64

import pytest

from traffic.scrub import detect as scrubber_detect
from traffic.scrub.rules import detect

HEX32 = "5d0c7be9a3f14e2b8c6d9a0f1e2b3c4d"


def _found(text: str) -> list[tuple[str, str]]:
    return [(d.kind, text[d.start : d.end]) for d in detect(text, pii=False)]


def _scrubbed(text: str) -> list[tuple[str, str]]:
    return [(d.kind, text[d.start : d.end]) for d in scrubber_detect(text, pii=False)]


@pytest.mark.parametrize(
    ("kind", "token"),
    [
        ("vault_token", "hvs.CAESIF9kq2Lr8Xw1vYb7Tn0sPz4a6dGmE3hJcQuR5tWx"),
        ("doppler_token", "dp.st.prd." + "Kq8Lr2Xw1vYb7Tn0sPz4a6dGmE3hJcQuR5tWxZ9y1B2c"),
        ("notion_token", "ntn_" + "58213409761" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z"),
        ("mailgun_key", "key-" + HEX32),
        ("mailgun_key", HEX32 + "-a1b2c3d4-e5f60718"),
        ("age_secret_key", "AGE-SECRET-KEY-1" + "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" * 1 + "Q" * 26),
        ("braintree_token", "access_token$production$k7x2m9q4w8e1r5t3$" + HEX32),
        ("twitter_token", "A" * 22 + "Kq8Lr2Xw1vYb7Tn0sPz4%2Ba6dGmE3hJcQuR5tWx"),
        ("grafana_token", "glsa_Kq8Lr2Xw1vYb7Tn0sPz4a6dGmE3hJcQu_5d0c7be9"),
        ("heroku_key", "HRKU-AAKq8Lr2Xw1vYb7Tn0sPz4a6dGmE3hJcQuR5tWxZ9y1B2c_3D4e"),
        ("twilio_key", "SK" + HEX32),
        ("mapbox_token", "sk.eyJ1IjoiZGV2IiwiYSI6ImNrMTIzIn0.Kq8Lr2Xw1vYb7Tn0sPz4aQ"),
        ("stripe_key", "whsec_Kq8Lr2Xw1vYb7Tn0sPz4a6dGmE3hJcQu"),
        ("slack_token", "xapp-1-A0123BCDE-4567890123-" + HEX32),
        ("supabase_token", "sbp_" + HEX32 + "0a1b2c3d"),
        ("pulumi_token", "pul-" + HEX32 + "0a1b2c3d"),
    ],
)
def test_a_vendor_token_is_found_whole(kind: str, token: str) -> None:
    text = f"export SERVICE_CREDENTIAL_X={token}\n"
    assert (kind, token) in _found(text)


def test_a_firebase_server_key_is_found_from_its_first_character() -> None:
    key = "AAAAq1w2e3R:APA91b" + "Fz8Kq8Lr2Xw1vYb7Tn0sPz4a6dGmE3hJcQuR5tWxZ9y1B2c" * 3
    assert ("fcm_server_key", key) in _found(f"fcm.server.key={key}\n")


def test_a_twilio_auth_token_after_its_account_sid_is_found_but_not_the_sid() -> None:
    sid, token = "AC" + HEX32, "9f8e7d6c5b4a39281706f5e4d3c2b1a0"
    found = _found(f'client = Client("{sid}", "{token}")')
    assert ("twilio_key", token) in found
    assert all(value != sid for _, value in found)


@pytest.mark.parametrize(
    "url",
    [
        "https://discord.com/api/webhooks/123456789012345678/Kq8Lr2Xw1vYb7Tn0sPz4a6dGmE3hJcQu",
        "https://contoso.webhook.office.com/webhookb2/0f1e2d3c-aaaa@bbbb/IncomingWebhook/" + HEX32,
        "https://hooks.zapier.com/hooks/catch/1234567/abc9de/",
    ],
)
def test_webhook_urls_are_credentials(url: str) -> None:
    assert ("webhook_url", url) in _found(f"ALERT_HOOK: {url}\n")


def test_only_the_signature_of_a_shared_access_url_is_secret() -> None:
    sig = "Kq8Lr2Xw1vYb7Tn0sPz4a6dGmE3hJcQu%2BR5tWx%3D"
    url = f"https://acct.blob.core.windows.net/c?sv=2022-11-02&sp=r&sig={sig}"
    assert _found(url) == [("azure_sas_token", sig)]


def test_a_base64_private_key_is_found_and_a_base64_certificate_is_not() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x\n-----END RSA PRIVATE KEY-----\n"
    cert = "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIE\n-----END CERTIFICATE-----\n"
    key_b64 = base64.b64encode(pem.encode()).decode()
    cert_b64 = base64.b64encode(cert.encode()).decode()
    assert ("private_key_pem", key_b64) in _found(f"    client-key-data: {key_b64}\n")
    assert _scrubbed(f"    client-certificate-data: {cert_b64}\n") == []


@pytest.mark.parametrize(
    ("text", "password"),
    [
        ("REDIS_URL=redis://:w8Xq2LmZ4r@cache:6379/0", "w8Xq2LmZ4r"),
        ('sql.Open("mysql", "app:Tq9zW2xLm4@tcp(db:3306)/shop")', "Tq9zW2xLm4"),
    ],
)
def test_passwords_in_connection_strings_without_a_user(text: str, password: str) -> None:
    assert ("password_in_url", password) in _found(text)


@pytest.mark.parametrize(
    "text",
    [
        "mapboxgl.accessToken = 'pk.eyJ1IjoiZGV2IiwiYSI6ImNrMTIzIn0.Kq8Lr2Xw1vYb7Tn0sPz4aQ';",
        "SQUARE_APPLICATION_ID=sq0idp-Kq8Lr2Xw1vYb7Tn0sPz4aQ",
        "TWILIO_ACCOUNT_SID=AC" + HEX32,
        "const stripe = Stripe('pk_live_51Kq8Lr2Xw1vYb7Tn0sPz4a6dGmE3hJcQu');",
        "ask_question_about_sk" + HEX32,
        f"commit {HEX32}0a1b2c3d, uuid 0f1e2d3c-4b5a-6978-8091-a2b3c4d5e6f7",
        "REDIS_URL=redis://:${REDIS_PASSWORD}@cache:6379/0",
    ],
)
def test_public_identifiers_and_references_survive(text: str) -> None:
    assert _scrubbed(text) == []
