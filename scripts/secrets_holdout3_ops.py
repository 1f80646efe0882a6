"""Held-out set 3, operations: shell history, command output, logs, HTTP requests and responses,
README snippets, issue reports, tool exports (see secrets_holdout3.py)."""

from __future__ import annotations

from secrets_holdout3 import (
    ALNUM,
    B64URL,
    HEX,
    LOWER_DIGITS,
    UPPER_DIGITS,
    Fake3,
    N,
    Part,
    S,
    Template,
)


def bash_history(f: Fake3) -> list[Part]:
    return [
        "  501  mysql -h db.internal -u root -p'",
        S("password", f.password(symbols="!#%^*@")),
        "' shop < dump.sql\n  502  PGPASSWORD=",
        S("password", f.pick(ALNUM, 18)),
        " psql -h pg -U app -d orders -c '\\dt'\n  503  export GITHUB_TOKEN=",
        S("github_token", f.github_token()),
        "\n  504  sshpass -p '",
        S("password", f.password(symbols="!#%^*@")),
        "' ssh ",
        N("ssh_target", "deploy@bastion.acme.dev"),
        "\n  505  git checkout ",
        N("short_sha", f.pick(HEX, 7)),
        "\n  506  curl -u admin:",
        S("password", f.pick(ALNUM, 14)),
        " https://jenkins.acme.dev/api/json\n",
    ]


def zsh_history(f: Fake3) -> list[Part]:
    return [
        ": 1718000000:0;aws configure set aws_secret_access_key ",
        S("aws_secret", f.aws_secret()),
        "\n: 1718000042:0;heroku config:set STRIPE_SECRET_KEY=",
        S("stripe_key", f.stripe_key()),
        " -a acme-api\n: 1718000101:0;docker login -u acme -p ",
        S("password", f.password(symbols="!#%^*@")),
        " registry.acme.dev\n: 1718000160:0;redis-cli -h cache -a ",
        S("password", f.pick(ALNUM, 24)),
        " FLUSHDB\n: 1718000200:0;kubectl create secret generic api --from-literal=token=",
        S("bearer_token", f.opaque_token()),
        "\n: 1718000260:0;openssl pkcs12 -export -in tls.crt -inkey tls.key -out tls.p12 "
        "-passout pass:",
        S("password", f.password(symbols="!#%^*@")),
        "\n",
    ]


def powershell(f: Fake3) -> list[Part]:
    return [
        'PS C:\\src\\acme> $env:OPENAI_API_KEY = "',
        S("openai_key", f.openai_key()),
        '"\nPS C:\\src\\acme> net user svc_backup ',
        S("password", f.password(symbols="!#%^*@")),
        ' /add\nPS C:\\src\\acme> $pw = ConvertTo-SecureString "',
        S("password", f.password()),
        '" -AsPlainText -Force\nPS C:\\src\\acme> Get-FileHash .\\setup.exe\n\n'
        "Algorithm       Hash\n---------       ----\nSHA256          ",
        N("sha256", f.sha256().upper()),
        "\n",
    ]


def curl_api(f: Fake3) -> list[Part]:
    return [
        "$ curl -s https://api.acme.dev/v1/invoices \\\n  -H 'Authorization: Bearer ",
        S("jwt", f.jwt()),
        "' \\\n  -H 'X-API-Key: ",
        S("generic_secret", f.pick(ALNUM, 40)),
        '\'\n{"data": [], "request_id": "',
        N("uuid", f.uuid()),
        '", "next_cursor": "',
        N("pagination_cursor", "eyJvZmZzZXQiOjUwLCJsaW1pdCI6NTB9"),
        '"}\n',
    ]


def http_login(f: Fake3) -> list[Part]:
    name, value = f.session_cookie()
    pw = f.password(symbols="!#%*@")
    encoded = pw.replace("!", "%21").replace("#", "%23").replace("@", "%40")
    return [
        "POST /accounts/login/ HTTP/1.1\nHost: portal.acme.dev\n"
        "Content-Type: application/x-www-form-urlencoded\nCookie: ",
        name,
        "=",
        S("session_cookie", value),
        "; theme=dark\nX-Request-ID: ",
        N("uuid", f.uuid()),
        "\n\nusername=jdoe&password=",
        S("password", encoded),
        "&remember=on\n",
    ]


def http_response(f: Fake3) -> list[Part]:
    name, value = f.session_cookie()
    return [
        "HTTP/1.1 302 Found\nLocation: /dashboard\nSet-Cookie: ",
        name,
        "=",
        S("session_cookie", value),
        '; Path=/; HttpOnly; Secure; SameSite=Lax\nETag: W/"',
        N("md5", f.md5()),
        "\"\nContent-Security-Policy: script-src 'self' 'nonce-",
        N("nonce", f.b64_secret(16)),
        "'\nX-Trace-Id: ",
        N("trace_id", f.trace_id()),
        "\n",
    ]


def curl_verbose(f: Fake3) -> list[Part]:
    return [
        "* Connected to artifacts.acme.dev port 443\n* SSL certificate verify ok.\n"
        "> GET /repository/releases/acme-cli-",
        N("version", f.version()),
        ".tar.gz HTTP/1.1\n> Host: artifacts.acme.dev\n> Authorization: Basic ",
        S("basic_auth", f.basic_auth("ci-reader")),
        "\n> User-Agent: curl/8.5.0\n< HTTP/1.1 200 OK\n< x-checksum-sha1: ",
        N("checksum", f.git_sha()),
        "\n< x-amz-request-id: ",
        N("resource_id", f.pick(UPPER_DIGITS, 16)),
        "\n",
    ]


def json_logs(f: Fake3) -> list[Part]:
    return [
        '{"ts":"',
        N("date", f.ts()),
        '","level":"info","msg":"upstream call","url":"https://graph.facebook.com/v19.0/me'
        "?fields=id,name&access_token=",
        S("facebook_token", f.facebook_token()),
        '","trace_id":"',
        N("trace_id", f.trace_id()),
        '","span_id":"',
        N("trace_id", f.pick(HEX, 16)),
        '"}\n{"level":"debug","msg":"client configured","api_key":"',
        N("masked_secret", "sk-proj-****" + f.pick(ALNUM, 4)),
        '","password":"',
        N("masked_secret", "********"),
        '"}\n',
    ]


def nginx_access(f: Fake3) -> list[Part]:
    return [
        'gw-3 - - [12/Mar/2024:10:01:22 +0000] "GET /oauth/callback?code=',
        S("generic_secret", "4/0A" + f.pick(B64URL, 60)),
        "&state=",
        N("nonce", f.pick(ALNUM, 32)),
        ' HTTP/1.1" 302 0 "-" "Mozilla/5.0"\ngw-3 - - [12/Mar/2024:10:01:25 +0000] '
        '"GET /files/export.csv?token=',
        S("jwt", f.jwt()),
        ' HTTP/1.1" 200 18234 "-" "python-requests/',
        N("version", f.version()),
        '"\n',
    ]


def drf_debug(f: Fake3) -> list[Part]:
    return [
        "META:\n  'CONTENT_TYPE': 'application/json',\n  'HTTP_AUTHORIZATION': 'Token ",
        S("bearer_token", f.pick(HEX, 40)),
        "',\n  'HTTP_X_REQUEST_ID': '",
        N("uuid", f.uuid()),
        "',\n  'PYTHONHASHSEED': '0',\n  'DJANGO_SETTINGS_MODULE': 'acme.settings.dev',\n"
        "  'SERVER_SOFTWARE': 'gunicorn/",
        N("version", f.version()),
        "'\n",
    ]


def docker_inspect(f: Fake3) -> list[Part]:
    return [
        '$ docker inspect api | jq ".[0].Config"\n{\n  "Hostname": "',
        N("container_id", f.pick(HEX, 12)),
        '",\n  "Env": [\n    "POSTGRES_PASSWORD=',
        S("password", f.password()),
        '",\n    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",\n    "GOSU_VERSION=',
        N("version", f.version()),
        '",\n    "SENDGRID_API_KEY=',
        S("sendgrid_key", f.sendgrid_key()),
        '"\n  ],\n  "Image": "sha256:',
        N("sha256", f.sha256()),
        '"\n}\n',
    ]


def env_dump(f: Fake3) -> list[Part]:
    return [
        "$ env | sort\nAWS_ACCESS_KEY_ID=",
        S("aws_access_key", f.aws_key_id()),
        "\nAWS_DEFAULT_REGION=eu-west-1\nAWS_SECRET_ACCESS_KEY=",
        S("aws_secret", f.aws_secret()),
        "\nHOME=/root\nHOSTNAME=",
        N("container_id", f.pick(HEX, 12)),
        "\nNPM_CONFIG_CACHE=/tmp/.npm\nSLACK_BOT_TOKEN=",
        S("slack_token", f.slack_token()),
        "\nTZ=UTC\n",
    ]


def terraform_output(f: Fake3) -> list[Part]:
    return [
        "Apply complete! Resources: 3 added, 0 changed, 0 destroyed.\n\nOutputs:\n\n"
        'admin_password = <sensitive>\ninstance_id = "i-',
        N("resource_id", f.pick(HEX, 17)),
        '"\n\n$ terraform output -raw admin_password\n',
        S("password", f.password()),
        "\n$ terraform output -raw grafana_token\n",
        S("grafana_token", f.grafana_token()),
        "\n",
    ]


def sts_output(f: Fake3) -> list[Part]:
    account = f.account_id()
    return [
        "$ aws sts assume-role --role-arn arn:aws:iam::",
        N("account_id", account),
        ':role/deployer --role-session-name ci\n{\n    "Credentials": {\n        "AccessKeyId": "',
        S("aws_access_key", "ASIA" + f.pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)),
        '",\n        "SecretAccessKey": "',
        S("aws_secret", f.aws_secret()),
        '",\n        "SessionToken": "',
        S("aws_session_token", f.aws_session_token()),
        '",\n        "Expiration": "',
        N("date", f.ts()),
        '"\n    },\n    "AssumedRoleUser": {"AssumedRoleId": "AROA',
        N("key_id", f.pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 17)),
        ':ci"}\n}\n',
    ]


def google_oauth(f: Fake3) -> list[Part]:
    project = f.pick("0123456789", 12)
    return [
        '// client_secret.json\n{"installed": {"client_id": "',
        N("client_id", f"{project}-{f.pick(LOWER_DIGITS, 32)}.apps.googleusercontent.com"),
        '", "client_secret": "',
        S("google_oauth", f.gcp_oauth_secret()),
        '"}}\n\n// token.json\n{"access_token": "',
        S("google_oauth", f.google_access_token()),
        '", "expires_in": 3599, "refresh_token": "',
        S("google_oauth", f.google_refresh_token()),
        '", "scope": "https://www.googleapis.com/auth/drive.readonly", "token_type": "Bearer"}\n',
    ]


def readme_quickstart(f: Fake3) -> list[Part]:
    return [
        "## Quickstart\n\n![version](https://img.shields.io/badge/version-",
        N("version", f.version()),
        "-blue)\n\nSet `",
        N("secret_name", "STRIPE_SECRET_KEY"),
        "` and `",
        N("secret_name", "SENTRY_AUTH_TOKEN"),
        '` in your environment, then:\n\n```bash\nexport OPENAI_API_KEY="',
        N("placeholder", f.one(["sk-...", "<your-api-key>", "your-api-key-here"])),
        '"\ncurl https://api.stripe.com/v1/charges -u ',
        N("vendor_example_key", "sk_test_4eC39HqLyjWDarjtT1zdp7dc"),
        ': -d amount=2000\ncurl -H "Authorization: Bearer ',
        N("env_reference", "$API_TOKEN"),
        '" https://api.acme.dev/v1/me\n```\n\nKeys look like `',
        N("placeholder", "sk_live_..."),
        "` (secret) or `",
        N("placeholder", "pk_live_..."),
        "` (publishable).\n",
    ]


def readme_leak(f: Fake3) -> list[Part]:
    return [
        "### Running locally\n\n```sh\nMAILCHIMP_API_KEY=",
        S("mailchimp_key", f.mailchimp_key()),
        " TWITTER_BEARER_TOKEN=",
        S("twitter_token", f.twitter_bearer()),
        " npm run dev\n```\n\nTested with node v",
        N("version", f.version()),
        " on commit ",
        N("git_sha", f.git_sha()),
        ".\n",
    ]


def github_issue(f: Fake3) -> list[Part]:
    return [
        "**Describe the bug**\nThe CLI returns 401 even though my token works with curl:\n\n"
        "```\n$ acme login --token ",
        S("github_token", f.github_token()),
        "\nError: 401 Unauthorized (request ",
        N("uuid", f.uuid()),
        ")\n```\n\n**Environment**\n- acme-cli ",
        N("version", f.version()),
        "\n- macOS 14.4, build ",
        N("resource_id", "23E" + f.pick("0123456789", 3)),
        "\n",
    ]


def git_remote(f: Fake3) -> list[Part]:
    return [
        "$ git remote -v\norigin\thttps://oauth2:",
        S("gitlab_token", "glpat-" + f.pick(ALNUM + "-_", 20)),
        "@gitlab.com/acme/platform.git (fetch)\nupstream\thttps://github.com/acme/platform.git "
        "(fetch)\n$ git log -2 --format='%h %an <%ae> %s'\n",
        N("short_sha", f.pick(HEX, 7)),
        " Priya Nair <",
        S("email", "priya.nair@globex.de"),
        "> fix flaky retry test\n",
        N("short_sha", f.pick(HEX, 7)),
        " dependabot[bot] <",
        N("service_account", "49699333+dependabot[bot]@users.noreply.github.com"),
        "> bump axios\n",
    ]


OPS_TEMPLATES: list[tuple[str, Template]] = [
    (".bash_history", bash_history),
    (".zsh_history", zsh_history),
    ("powershell", powershell),
    ("curl", curl_api),
    ("http request", http_login),
    ("http response", http_response),
    ("curl -v", curl_verbose),
    ("json logs", json_logs),
    ("nginx access log", nginx_access),
    ("django debug page", drf_debug),
    ("docker inspect", docker_inspect),
    ("env dump", env_dump),
    ("terraform output", terraform_output),
    ("aws sts", sts_output),
    ("google oauth files", google_oauth),
    ("README", readme_quickstart),
    ("README", readme_leak),
    ("github issue", github_issue),
    ("git output", git_remote),
]
