"""Secrets known by their place (traffic.scrub.positional): a tool's password argument, SQL's
IDENTIFIED BY, and a credential passed to a call by position; variables, templates and the
other arguments survive."""

from __future__ import annotations

import pytest

from traffic.scrub import detect as scrubber_detect
from traffic.scrub.rules import detect


def _found(text: str) -> list[tuple[str, str]]:
    return [(d.kind, text[d.start : d.end]) for d in detect(text, pii=False)]


def _scrubbed(text: str) -> list[tuple[str, str]]:
    return [(d.kind, text[d.start : d.end]) for d in scrubber_detect(text, pii=False)]


@pytest.mark.parametrize(
    ("text", "password"),
    [
        ("mysql -h db -u root -p'Kp3#vLx9q' shop < dump.sql", "Kp3#vLx9q"),
        ('sshpass -p "amber-Falcon-77" ssh ops@jump', "amber-Falcon-77"),
        ("net user svc_sync Rw7!pQz2Lm /add", "Rw7!pQz2Lm"),
        ('$s = ConvertTo-SecureString "Hx5$wq2!Lz" -AsPlainText -Force', "Hx5$wq2!Lz"),
        ("htpasswd -bc /etc/nginx/.htpasswd admin Qz8pLm2wX", "Qz8pLm2wX"),
        ("openssl pkcs12 -export -in c.pem -passout pass:Tr0ub4dor3 -out c.p12", "Tr0ub4dor3"),
        ("keytool -list -keystore ks.jks -storepass Wq9Lm2xZr", "Wq9Lm2xZr"),
        ("sqlcmd -S db -U sa -P Zx8!qLm2w -Q 'select 1'", "Zx8!qLm2w"),
        ("smbclient //nas/share -U backup%Lm2wZx8q", "Lm2wZx8q"),
        ("ldapsearch -x -D cn=admin -w Pq7Lm2wZx -b dc=corp", "Pq7Lm2wZx"),
        ("zip -r -P Kq8Lr2Xw1 backup.zip data/", "Kq8Lr2Xw1"),
        ("echo 'Kq8Lr2Xw1vYb' | docker login ghcr.io -u bot --password-stdin", "Kq8Lr2Xw1vYb"),
    ],
)
def test_a_tools_password_argument(text: str, password: str) -> None:
    assert ("password", password) in _found(text)


@pytest.mark.parametrize(
    "text",
    [
        'echo "$CR_PAT" | docker login ghcr.io -u bot --password-stdin',
        "net user svc_sync /delete",
        "keytool -list -keystore ks.jks -storepass $STORE_PASS",
        "zip -r backup.zip data/",
    ],
)
def test_variables_and_commands_without_a_password_survive(text: str) -> None:
    assert _scrubbed(text) == []


@pytest.mark.parametrize(
    ("text", "password"),
    [
        ("CREATE USER 'etl'@'%' IDENTIFIED BY 'Wq9!Lm2xZr';", "Wq9!Lm2xZr"),
        ("ALTER USER 'a'@'h' IDENTIFIED WITH caching_sha2_password BY 'ochre-lynx-pivot';", None),
        ("CREATE USER app IDENTIFIED BY Tz8pLm2wq;", "Tz8pLm2wq"),
        ("CREATE ROLE app WITH LOGIN PASSWORD 'Qm3!vLx8pz';", "Qm3!vLx8pz"),
    ],
)
def test_passwords_in_sql(text: str, password: str | None) -> None:
    expected = password or "ochre-lynx-pivot"
    assert ("password", expected) in _found(text)


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        (
            'DriverManager.getConnection("jdbc:mysql://db/crm", "root", "Lq4uUm5Itm!");',
            "password",
            "Lq4uUm5Itm!",
        ),
        ("server.login('alerts@corp', 'abcd efgh ijkl mnop')", "password", "abcd efgh ijkl mnop"),
        ("r = requests.get(url, auth=('svc', 'Zx8!qLm2w'))", "password", "Zx8!qLm2w"),
        ('var c = new NetworkCredential("svc", "Pq7Lm2wZx!");', "password", "Pq7Lm2wZx!"),
        ('req.SetBasicAuth("svc", "Rw7!pQz2Lm")', "password", "Rw7!pQz2Lm"),
        ("$db = new mysqli('localhost', 'shop', 'Tz8p!Lm2wq', 'shop');", "password", "Tz8p!Lm2wq"),
        (
            "const t = jwt.sign({ uid: u.id, roles: [1, 2] }, 'k9-hmac-Zp2wq8Lm', { exp: 60 })",
            "generic_secret",
            "k9-hmac-Zp2wq8Lm",
        ),
        (
            "crypto.createHmac('sha256', 'wh_9Zp2wq8LmXr').update(body)",
            "generic_secret",
            "wh_9Zp2wq8LmXr",
        ),
    ],
)
def test_a_credential_passed_by_position(text: str, kind: str, value: str) -> None:
    assert (kind, value) in _found(text)


@pytest.mark.parametrize(
    "text",
    [
        'DriverManager.getConnection(url, "root", password);',
        "server.login(user, os.environ['SMTP_PASSWORD'])",
        "r = requests.get(url, auth=('svc', token))",
        "jwt.sign(payload, process.env.JWT_SECRET)",
        "client.login('alice', 'hunter')",
        "crypto.createHmac('sha256', secret).update(body)",
    ],
)
def test_variables_and_words_in_credential_positions_survive(text: str) -> None:
    assert _scrubbed(text) == []
