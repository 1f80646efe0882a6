"""Held-out set 3, configuration, part 2: credential files of tools, Kubernetes and
cloud credentials, Terraform, Ansible, WireGuard, Helm, Maven/NuGet, lock files (see
secrets_holdout3.py)."""

from __future__ import annotations

from secrets_holdout3 import (
    ALNUM,
    HEX,
    UPPER_DIGITS,
    Fake3,
    N,
    Part,
    S,
    Template,
    b64,
)


def netrc_credentials(f: Fake3) -> list[Part]:
    return [
        "# ~/.netrc\nmachine api.heroku.com\n  login ",
        S("email", "ops.lead@acme-corp.io"),
        "\n  password ",
        S("heroku_key", f.heroku_key()),
        "\nmachine git.heroku.com\n  login ",
        S("email", "ops.lead@acme-corp.io"),
        "\n  password ",
        S("heroku_key", f.heroku_key()),
        "\n\n# ~/.git-credentials\nhttps://acme-bot:",
        S("github_token", f.github_token()),
        "@github.com\n",
    ]


def docker_config(f: Fake3) -> list[Part]:
    return [
        '{\n  "auths": {\n    "registry.gitlab.com": {\n      "auth": "',
        S("basic_auth", f.basic_auth("deploy-bot")),
        '"\n    },\n    "https://index.docker.io/v1/": {\n      "auth": "',
        S("basic_auth", f.basic_auth("acmeci")),
        '"\n    }\n  },\n  "credsStore": "desktop"\n}\n',
    ]


def kubeconfig(f: Fake3) -> list[Part]:
    pem = f.private_key("RSA PRIVATE KEY")
    return [
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: ",
        N("certificate", b64(f.public_key_pem("CERTIFICATE").encode())[:400]),
        "\n    server: https://k8s.acme.dev:6443\n  name: prod\nusers:\n- name: admin\n  user:\n"
        "    client-key-data: ",
        S("private_key_pem", b64(pem.encode())),
        "\n- name: ci\n  user:\n    token: ",
        S("jwt", f.jwt(long_sig=True)),
        "\n",
    ]


def aws_credentials(f: Fake3) -> list[Part]:
    return [
        "# ~/.aws/credentials\n[default]\naws_access_key_id = ",
        S("aws_access_key", "AKIA" + f.pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)),
        "\naws_secret_access_key = ",
        S("aws_secret", f.aws_secret()),
        "\n\n[temp]\naws_access_key_id = ",
        S("aws_access_key", "ASIA" + f.pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)),
        "\naws_secret_access_key = ",
        S("aws_secret", f.aws_secret()),
        "\naws_session_token = ",
        S("aws_session_token", f.aws_session_token()),
        "\n\n# ~/.aws/config\n[profile prod]\nsso_account_id = ",
        N("account_id", f.account_id()),
        "\nsso_role_name = AdministratorAccess\n",
    ]


def gcp_service_account(f: Fake3) -> list[Part]:
    return [
        '{\n  "type": "service_account",\n  "project_id": "acme-data-prod",\n  "private_key_id": "',
        N("key_id", f.git_sha()),
        '",\n  "private_key": "',
        S("private_key_pem", f.private_key("PRIVATE KEY", escaped=True)),
        '\\n",\n  "client_email": "',
        N("service_account", "etl-runner@acme-data-prod.iam.gserviceaccount.com"),
        '",\n  "client_id": "',
        N("numeric_id", f.pick("0123456789", 21)),
        '",\n  "token_uri": "https://oauth2.googleapis.com/token"\n}\n',
    ]


def terraform(f: Fake3) -> list[Part]:
    return [
        'provider "aws" {\n  region     = "us-east-1"\n  access_key = "',
        S("aws_access_key", f.aws_key_id()),
        '"\n  secret_key = "',
        S("aws_secret", f.aws_secret()),
        '"\n}\n\nvariable "',
        N("secret_name", "db_password"),
        '" {\n  type      = string\n  sensitive = true\n}\n\nresource "aws_instance" "bastion" {\n'
        '  ami           = "ami-',
        N("resource_id", f.pick(HEX, 17)),
        '"\n  instance_type = "t3.micro"\n}\n\n# terraform.tfvars\ndb_password = "',
        S("password", f.password()),
        '"\n',
    ]


def ansible_vars(f: Fake3) -> list[Part]:
    cipher = "\n".join("          " + f.pick(HEX, 80) for _ in range(3))
    return [
        "# group_vars/db.yml\nansible_user: deploy\nansible_become_pass: ",
        S("password", f.password(symbols="!%^*@")),
        "\nmysql_root_password: ",
        N("env_reference", '"{{ vault_mysql_root_password }}"'),
        "\nreplication_password: !vault |\n          $ANSIBLE_VAULT;1.1;AES256\n",
        N("ciphertext", cipher),
        "\n",
    ]


def wireguard(f: Fake3) -> list[Part]:
    return [
        "[Interface]\nAddress = ",
        N("private_ip", "10.8.0.2"),
        "/24\nPrivateKey = ",
        S("wireguard_key", f.wireguard_key()),
        "\n\n[Peer]\nPublicKey = ",
        N("public_key", f.wireguard_key()),
        "\nPresharedKey = ",
        S("wireguard_key", f.wireguard_key()),
        "\nEndpoint = vpn.acme.dev:51820\nAllowedIPs = ",
        N("private_ip", "10.8.0.0"),
        "/24\n",
    ]


def helm_values(f: Fake3) -> list[Part]:
    return [
        "image:\n  repository: ghcr.io/acme/worker\n  tag: ",
        N("short_sha", f.pick(HEX, 7)),
        "\npostgresql:\n  auth:\n    username: worker\n    password: ",
        S("password", f.password(symbols="!%^*@")),
        "\n    existingSecret: ",
        N("secret_name", "worker-postgresql-credentials"),
        "\nrabbitmq:\n  auth:\n    erlangCookie: ",
        S("generic_secret", f.pick(UPPER_DIGITS, 32)),
        "\n",
    ]


def maven_nuget(f: Fake3) -> list[Part]:
    return [
        "<!-- ~/.m2/settings.xml -->\n<servers>\n  <server>\n    <id>nexus-releases</id>\n"
        "    <username>deployment</username>\n    <password>",
        S("password", f.password()),
        "</password>\n  </server>\n</servers>\n\n"
        "<!-- NuGet.Config -->\n<packageSourceCredentials>\n"
        '  <github>\n    <add key="Username" value="acme-ci" />\n'
        '    <add key="ClearTextPassword" value="',
        S("github_token", f.github_token()),
        '" />\n  </github>\n</packageSourceCredentials>\n',
    ]


def db_client_files(f: Fake3) -> list[Part]:
    return [
        "# ~/.my.cnf\n[client]\nuser=root\npassword=",
        S("password", f.password()),
        "\n\n# ~/.pgpass\ndb.internal:5432:analytics:analyst:",
        S("password", f.password()),
        "\n",
    ]


def s3cfg_rclone(f: Fake3) -> list[Part]:
    return [
        "# ~/.s3cfg\n[default]\naccess_key = ",
        S("aws_access_key", f.aws_key_id()),
        "\nsecret_key = ",
        S("aws_secret", f.aws_secret()),
        "\n\n# rclone.conf\n[oss]\ntype = s3\nprovider = Alibaba\naccess_key_id = ",
        S("alibaba_key", f.alibaba_key_id()),
        "\nsecret_access_key = ",
        S("generic_secret", f.pick(ALNUM, 30)),
        "\n",
    ]


def serverless(f: Fake3) -> list[Part]:
    return [
        "provider:\n  name: aws\n  environment:\n    STRIPE_KEY: ",
        N("env_reference", "${ssm:/prod/stripe/secret-key}"),
        "\n    SLACK_WEBHOOK_URL: ",
        S("slack_webhook", f.slack_webhook()),
        "\n    ALERT_WEBHOOK: ",
        S("webhook_url", f.webhook_url()),
        "\n  deploymentBucket: serverless-deploys-",
        N("account_id", f.account_id()),
        "\n",
    ]


def package_lock(f: Fake3) -> list[Part]:
    return [
        '"node_modules/lodash": {\n  "version": "',
        N("version", f.version()),
        '",\n  "resolved": "https://registry.npmjs.org/lodash/-/lodash-4.17.21.tgz",\n'
        '  "integrity": "',
        N("integrity_hash", f.integrity()),
        '"\n},\n"node_modules/nanoid": {\n  "version": "3.3.7",\n  "integrity": "',
        N("integrity_hash", f.integrity()),
        '"\n}\n',
    ]


def poetry_lock(f: Fake3) -> list[Part]:
    return [
        '[[package]]\nname = "cryptography"\nversion = "',
        N("version", f.version()),
        '"\nfiles = [\n    {file = "cryptography-43.0.1.tar.gz", hash = "sha256:',
        N("sha256", f.sha256()),
        '"},\n]\n\n[metadata]\ncontent-hash = "',
        N("sha256", f.sha256()),
        '"\n',
    ]


def precommit(f: Fake3) -> list[Part]:
    return [
        "repos:\n  - repo: https://github.com/gitleaks/gitleaks\n    rev: ",
        N("git_sha", f.git_sha()),
        "  # frozen: v8.18.4\n    hooks:\n      - id: gitleaks\n  - repo: https://github.com/"
        "astral-sh/ruff-pre-commit\n    rev: v",
        N("version", f.version()),
        "\n    hooks:\n      - id: ruff\n",
    ]


def tool_tokens(f: Fake3) -> list[Part]:
    return [
        '// ~/.terraform.d/credentials.tfrc.json\n{"credentials": {"app.terraform.io": {"token": "',
        S("terraform_token", f.terraform_token()),
        '"}}}\n\n# shell profile\n'
        "export VAULT_ADDR=https://vault.acme.dev:8200\nexport VAULT_TOKEN=",
        S("vault_token", f.vault_token()),
        "\nexport DOPPLER_TOKEN=",
        S("doppler_token", f.doppler_token()),
        "\nexport PULUMI_ACCESS_TOKEN=",
        S("pulumi_token", f.pulumi_token()),
        "\n",
    ]


def observability_env(f: Fake3) -> list[Part]:
    return [
        "SENTRY_AUTH_TOKEN=",
        S("sentry_token", f.sentry_token()),
        "\nNEW_RELIC_API_KEY=",
        S("newrelic_key", f.newrelic_key()),
        "\nNEW_RELIC_LICENSE_KEY=",
        S("newrelic_key", f.pick(HEX, 36) + "NRAL"),
        "\nGRAFANA_SA_TOKEN=",
        S("grafana_token", f.grafana_token()),
        "\nOTEL_SERVICE_NAME=checkout\nOTEL_RESOURCE_ATTRIBUTES=service.version=",
        N("version", f.version()),
        "\n",
    ]


def wrangler_age(f: Fake3) -> list[Part]:
    return [
        'name = "edge-api"\naccount_id = "',
        N("account_id", f.pick(HEX, 32)),
        '"\nkv_namespaces = [{ binding = "CACHE", id = "',
        N("resource_id", f.pick(HEX, 32)),
        '" }]\n# export CLOUDFLARE_API_TOKEN=',
        S("cloudflare_token", f.cloudflare_token()),
        "\n\n# keys.txt (sops)\n# created: ",
        N("date", f.ts()),
        "\n# public key: age1",
        N("public_key", f.pick("qpzry9x8gf2tvdw0s3jn54khce6mua7l", 58)),
        "\n",
        S("age_secret_key", f.age_secret_key()),
        "\n",
    ]


def mobile_push(f: Fake3) -> list[Part]:
    return [
        "# push.properties\nfcm.server.key=",
        S("fcm_server_key", f.fcm_server_key()),
        "\nfcm.sender.id=",
        N("account_id", f.pick("0123456789", 12)),
        "\napns.key.id=",
        N("key_id", f.pick(UPPER_DIGITS, 10)),
        "\napns.team.id=",
        N("key_id", f.pick(UPPER_DIGITS, 10)),
        "\napns.p8=",
        S("private_key_pem", f.private_key("PRIVATE KEY", escaped=True)),
        "\n",
    ]


CONFIG2_TEMPLATES: list[tuple[str, Template]] = [
    (".netrc", netrc_credentials),
    ("docker config.json", docker_config),
    ("kubeconfig", kubeconfig),
    ("aws credentials", aws_credentials),
    ("gcp service account", gcp_service_account),
    ("terraform", terraform),
    ("ansible", ansible_vars),
    ("wireguard", wireguard),
    ("helm values", helm_values),
    ("maven/nuget", maven_nuget),
    ("my.cnf/.pgpass", db_client_files),
    (".s3cfg/rclone", s3cfg_rclone),
    ("serverless.yml", serverless),
    ("package-lock.json", package_lock),
    ("poetry.lock", poetry_lock),
    (".pre-commit-config.yaml", precommit),
    ("tool tokens", tool_tokens),
    ("observability .env", observability_env),
    ("wrangler/age", wrangler_age),
    ("push config", mobile_push),
]
