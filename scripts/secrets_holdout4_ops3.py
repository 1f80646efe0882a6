"""holdout4 templates: logs, stack traces, crash reports and lockfiles."""

from __future__ import annotations

import json

from secrets_holdout4 import Fake, N, Part, S, Template, fill


def log_sqlalchemy_error(f: Fake) -> list[Part]:
    return fill(
        """
        Traceback (most recent call last):
          File "{%path%}", line 41, in <module>
            engine.connect()
        sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) connection to server at
        "{%host%}" (10.2.0.14), port 5432 failed: FATAL:  password authentication failed
        [SQL: engine url postgresql://{%user%}:{%pw%}@{%host2%}:5432/orders]
        (Background on this error at: https://sqlalche.me/e/20/e3q8)
        """,
        path=N("file_path", f"/srv/{f.word()}/app/db.py"),
        host=f.host(),
        user=f.user(),
        pw=S("password", f.password()),
        host2=f.host(),
    )


def log_urllib3_debug(f: Fake) -> list[Part]:
    return fill(
        """
        DEBUG:urllib3.connectionpool:Starting new HTTPS connection (1): api.example.com:443
        DEBUG:urllib3.connectionpool:https://api.example.com:443 {%+%}
            "GET /v2/contacts?api_key={%key%}&page=2 HTTP/1.1" 200 5123
        DEBUG:app.sync:trace_id={%tid%} fetched 100 contacts
        """,
        key=S("api_key", f.hex(32)),
        tid=N("trace_id", f.trace_id()),
    )


def log_json_structured(f: Fake) -> list[Part]:
    line = {
        "ts": "@@ts",
        "level": "error",
        "msg": "upstream rejected request",
        "trace_id": "@@tid",
        "span_id": "@@sid",
        "http": {"method": "POST", "headers": {"authorization": "Bearer @@jwt"}},
    }
    text = json.dumps(line)
    parts: list[Part] = []
    values = {
        "@@ts": N("timestamp", f.timestamp()),
        "@@tid": N("trace_id", f.trace_id()),
        "@@sid": N("span_id", f.span_id()),
        "@@jwt": S("jwt", f.jwt()),
    }
    for marker, span in values.items():
        before, text = text.split(marker, 1)
        parts += [before, span]
    return [*parts, text + "\n"]


def log_nginx_oauth_code(f: Fake) -> list[Part]:
    return fill(
        """
        10.0.4.7 - - [03/Mar/2026:09:14:02 +0000] {%+%}
            "GET /auth/callback?code={%code%}&state={%state%} HTTP/1.1" 302 0
        10.0.4.7 - - [03/Mar/2026:09:14:03 +0000] {%+%}
            "GET /static/js/main.{%hash%}.js HTTP/1.1" 200 48213
        """,
        code=S("oauth_code", f.urlsafe(43)),
        state=N("oauth_state", f.hex(16)),
        hash=N("content_hash", f.hex(8)),
    )


def stacktrace_java_jdbc(f: Fake) -> list[Part]:
    return fill(
        """
        org.springframework.jdbc.CannotGetJdbcConnectionException: Failed to obtain JDBC Connection
            at org.springframework.jdbc.datasource.DataSourceUtils.{%+%}
                getConnection(DataSourceUtils.java:84)
        Caused by: java.sql.SQLException: Access denied for user 'app'@'10.1.2.3'
          url=jdbc:mysql://{%host%}:3306/shop?user=app&password={%pw%}&useSSL=true
            at com.mysql.cj.jdbc.exceptions.SQLError.createSQLException(SQLError.java:130)
        """,
        host=f.host(),
        pw=S("password", f.password()),
    )


def stacktrace_axios(f: Fake) -> list[Part]:
    return fill(
        """
        AxiosError: Request failed with status code 401
            at settle ({%path%}:19:12)
          config: {
            url: 'https://api.openai.com/v1/chat/completions',
            headers: {
              Authorization: 'Bearer {%key%}',
              'User-Agent': 'axios/{%ver%}'
            }
          }
        Node.js v{%node%}
        """,
        path=N("file_path", "/app/node_modules/axios/lib/core/settle.js"),
        key=S("openai_key", f.openai_key()),
        ver=N("semver", f"1.{f.num(5, 8)}.{f.num(0, 9)}"),
        node=N("semver", f"20.{f.num(10, 18)}.{f.num(0, 3)}"),
    )


def pydantic_settings_repr(f: Fake) -> list[Part]:
    return fill(
        """
        >>> settings
        Settings(env='prod', api_key=SecretStr('{%mask%}'), redis_password='{%pw%}',
                 build_sha='{%sha%}', sentry_release='{%ver%}')
        """,
        mask=N("masked_value", "**********"),
        pw=S("password", f.password()),
        sha=N("git_sha", f.git_sha()),
        ver=N("semver", f.semver()),
    )


def celery_log_lookalike(f: Fake) -> list[Part]:
    return fill(
        """
        [2026-03-03 10:22:41,118: INFO/MainProcess] Task billing.tasks.sync[{%t1%}] received
        [2026-03-03 10:22:41,902: INFO/ForkPoolWorker-3] Task billing.tasks.sync[{%t2%}] {%+%}
            succeeded in 0.78s: {'invoice': '{%inv%}'}
        """,
        t1=N("uuid", f.uuid()),
        t2=N("uuid", f.uuid()),
        inv=N("stripe_object_id", "in_" + f.alnum(24)),
    )


def sentry_event_cookie(f: Fake) -> list[Part]:
    return fill(
        """
        {
          "event_id": "{%eid%}",
          "release": "backend@{%ver%}",
          "request": {
            "url": "https://app.example.com/api/orders",
            "headers": { "Cookie": "sessionid={%sid%}; django_language=en" }
          }
        }
        """,
        eid=N("event_id", f.hex(32)),
        ver=N("semver", f.semver()),
        sid=S("session_cookie", f.lower(32)),
    )


def k8s_events_lookalike(f: Fake) -> list[Part]:
    return fill(
        """
        LAST SEEN   TYPE      REASON    OBJECT                       MESSAGE
        2m          Normal    Pulled    pod/{%pod%}   {%+%}
            Successfully pulled image "ghcr.io/acme/api@{%d%}"
        1m          Warning   BackOff   pod/{%pod2%}   Back-off restarting failed container
        """,
        pod=N("k8s_name", f.pod_name("api")),
        d=N("docker_digest", f.docker_digest()),
        pod2=N("k8s_name", f.pod_name("worker")),
    )


def stripe_signature_header(f: Fake) -> list[Part]:
    return fill(
        """
        received webhook: Stripe-Signature: t={%t%},v1={%sig%}
        verifying with STRIPE_WEBHOOK_SECRET={%sec%}
        """,
        t=str(f.epoch()),
        sig=N("webhook_signature", f.hex(64)),
        sec=S("stripe_webhook_secret", "whsec_" + f.alnum(32)),
    )


def lockfile_npm(f: Fake) -> list[Part]:
    return fill(
        """
        "node_modules/lodash": {
          "version": "{%ver%}",
          "resolved": "{%url%}",
          "integrity": "{%sri%}",
          "license": "MIT"
        },
        """,
        ver=N("semver", "4.17.21"),
        url=N("npm_resolved_url", "https://registry.npmjs.org/lodash/-/lodash-4.17.21.tgz"),
        sri=N("sri_hash", "sha512-" + f.b64(64)),
    )


def lockfile_poetry(f: Fake) -> list[Part]:
    return fill(
        """
        [[package]]
        name = "requests"
        version = "{%ver%}"
        files = [
            {file = "requests-{%ver2%}-py3-none-any.whl", hash = "sha256:{%h1%}"},
            {file = "requests-{%ver3%}.tar.gz", hash = "sha256:{%h2%}"},
        ]

        [metadata]
        content-hash = "{%ch%}"
        """,
        ver=N("semver", "2.32.3"),
        ver2=N("semver", "2.32.3"),
        h1=N("sha256", f.sha256()),
        ver3=N("semver", "2.32.3"),
        h2=N("sha256", f.sha256()),
        ch=N("sha256", f.sha256()),
    )


def lockfile_cargo_yarn(f: Fake) -> list[Part]:
    return fill(
        """
        [[package]]
        name = "serde"
        version = "1.0.{%pv%}"
        source = "registry+https://github.com/rust-lang/crates.io-index"
        checksum = "{%ck%}"

        # yarn.lock
        left-pad@^1.3.0:
          resolved "https://registry.yarnpkg.com/left-pad/-/left-pad-1.3.0.tgz#{%sha1%}"
        """,
        pv=str(f.num(150, 215)),
        ck=N("sha256", f.sha256()),
        sha1=N("sha1", f.hex(40)),
    )


def requirements_hashes(f: Fake) -> list[Part]:
    return fill(
        r"""
        certifi==2024.8.30 \
            --hash=sha256:{%h1%} \
            --hash=sha256:{%h2%}
        idna==3.10 \
            --hash=sha256:{%h3%}
        """,
        h1=N("sha256", f.sha256()),
        h2=N("sha256", f.sha256()),
        h3=N("sha256", f.sha256()),
    )


def jwks_lookalike(f: Fake) -> list[Part]:
    return fill(
        """
        {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": "{%kid%}",
          "n": "{%n%}",
          "e": "AQAB"}]}
        """,
        kid=N("key_id", f.urlsafe(43)),
        n=N("jwks_modulus", f.b64url(256)),
    )


def ios_info_plist(f: Fake) -> list[Part]:
    return fill(
        """
        <key>CFBundleShortVersionString</key>
        <string>{%ver%}</string>
        <key>CFBundleVersion</key>
        <string>{%build%}</string>
        <key>RevenueCatSecretKey</key>
        <string>{%rc%}</string>
        <key>AlgoliaAdminKey</key>
        <string>{%alg%}</string>
        """,
        ver=N("semver", f.semver()),
        build=N("build_number", str(f.num(100, 5000))),
        rc=S("revenuecat_secret_key", "sk_" + f.alnum(28)),
        alg=S("algolia_admin_key", f.hex(32)),
    )


def webhook_discord_py(f: Fake) -> list[Part]:
    return fill(
        """
        DISCORD_WEBHOOK = "{%hook%}"
        requests.post(DISCORD_WEBHOOK, json={"content": f"build {sha} failed"}, timeout=10)
        """,
        hook=S("discord_webhook", f.discord_webhook()),
    )


def webhook_teams_ps(f: Fake) -> list[Part]:
    return fill(
        """
        $body = @{ text = "Backup finished on $env:COMPUTERNAME" } | ConvertTo-Json
        Invoke-RestMethod -Method Post -ContentType 'application/json' -Body $body `
          -Uri "{%hook%}"
        """,
        hook=S("teams_webhook", f.teams_webhook()),
    )


def webhook_slack_sh(f: Fake) -> list[Part]:
    return fill(
        r"""
        curl -X POST -H 'Content-type: application/json' \
          --data '{"text":"deploy of {%sha%} done"}' \
          {%hook%}
        """,
        sha=N("git_sha", f.short_sha()),
        hook=S("slack_webhook", f.slack_webhook()),
    )


OPS3_TEMPLATES: list[tuple[str, Template]] = [
    ("log", log_sqlalchemy_error),
    ("log", log_urllib3_debug),
    ("log", log_json_structured),
    ("log", log_nginx_oauth_code),
    ("stacktrace", stacktrace_java_jdbc),
    ("stacktrace", stacktrace_axios),
    ("python_repl", pydantic_settings_repr),
    ("log", celery_log_lookalike),
    ("json", sentry_event_cookie),
    ("kubectl", k8s_events_lookalike),
    ("log", stripe_signature_header),
    ("lockfile", lockfile_npm),
    ("lockfile", lockfile_poetry),
    ("lockfile", lockfile_cargo_yarn),
    ("lockfile", requirements_hashes),
    ("json", jwks_lookalike),
    ("xml", ios_info_plist),
    ("python", webhook_discord_py),
    ("powershell", webhook_teams_ps),
    ("shell", webhook_slack_sh),
]
