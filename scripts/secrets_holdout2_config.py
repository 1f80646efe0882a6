"""The second held-out set, part one: the value makers it adds to `secrets_fakes` (passwords as
people choose them, vendor formats the tuning corpus lacks) and its configuration templates
(env files, Kubernetes, compose, Terraform, Ansible, ini files, framework settings).
Every value is random (seeded) and fake; nothing here is a real credential."""

from __future__ import annotations

import base64
import string
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported

from secrets_fakes import ALNUM, B64URL, HEX, LOWER_DIGITS, UPPER_DIGITS, Fake, Snippet

SHELL_SAFE = ALNUM + "-_.%+"
WORDS = ["Falcon", "harbor", "Copper", "violet", "Glacier", "pepper", "Nimbus", "otter"]

# ------------------------------------------------------------------ values


def password(f: Fake) -> str:
    """A password as a person or a generator makes one; no quote, backslash or space."""
    style = f.r.randrange(6)
    if style == 0:
        return f.one(WORDS) + "@" + str(f.r.randrange(2015, 2026))
    if style == 1:
        return f.pick(ALNUM + "!@#$%&*^", f.r.randrange(10, 18))
    if style == 2:
        return (
            f.one(["Sup3r", "Adm1n", "S3cure", "Pr0d", "Passw0rd"])
            + f.one(["-", "_", "!"])
            + f.pick(ALNUM, 6)
        )
    if style == 3:
        return f.pick(LOWER_DIGITS, f.r.randrange(9, 13))
    if style == 4:
        return f.one(WORDS).lower() + f.one(WORDS).lower() + str(f.r.randrange(10, 99))
    return f.password()


def shell_password(f: Fake) -> str:
    """A password that needs no quoting on a command line."""
    return f.one(WORDS) + f.one(["-", "_", "."]) + f.pick(SHELL_SAFE, f.r.randrange(8, 14))


def random_bytes_b64(f: Fake, n: int = 32) -> str:
    return base64.b64encode(bytes(f.r.randrange(256) for _ in range(n))).decode()


def generic_value(f: Fake) -> str:
    """A random secret in one of the shapes generators print."""
    style = f.r.randrange(5)
    if style == 0:
        return f.pick(HEX, 64)
    if style == 1:
        return random_bytes_b64(f)
    if style == 2:
        return f.pick(ALNUM, 32)
    if style == 3:
        raw = bytes(f.r.randrange(256) for _ in range(32))
        return base64.urlsafe_b64encode(raw).decode()  # a Fernet key
    return f.pick(B64URL, 43)


def azure_client_secret(f: Fake) -> str:
    return f.pick(ALNUM, 3) + f.one(list(string.digits)) + "Q~" + f.pick(ALNUM + "_.~-", 34)


VENDORS = 8


def vendor_token(f: Fake, choice: int | None = None) -> tuple[str, str, str]:
    """(variable name, kind, value) for a vendor whose format the tuning corpus lacks."""
    choice = f.r.randrange(VENDORS) if choice is None else choice
    if choice == 0:
        return "DIGITALOCEAN_TOKEN", "digitalocean_token", "dop_v1_" + f.pick(HEX, 64)
    if choice == 1:
        return "SHOPIFY_ACCESS_TOKEN", "shopify_token", "shpat_" + f.pick(HEX, 32)
    if choice == 2:
        return "LINEAR_API_KEY", "linear_key", "lin_api_" + f.pick(ALNUM, 40)
    if choice == 3:
        return "GROQ_API_KEY", "groq_key", "gsk_" + f.pick(ALNUM, 52)
    if choice == 4:
        return "DATABRICKS_TOKEN", "databricks_token", "dapi" + f.pick(HEX, 32)
    if choice == 5:
        return "REPLICATE_API_TOKEN", "replicate_token", "r8_" + f.pick(ALNUM, 37)
    if choice == 6:
        return "NEW_RELIC_API_KEY", "newrelic_key", "NRAK-" + f.pick(UPPER_DIGITS, 27)
    return "POSTMAN_API_KEY", "postman_key", f"PMAK-{f.pick(HEX, 24)}-{f.pick(HEX, 34)}"


# ------------------------------------------------------------------ templates


def nextjs_env(b: Snippet, f: Fake) -> None:
    b.t("# .env.local (next dev)\nNEXTAUTH_URL=http://localhost:3000\nNEXTAUTH_SECRET=")
    b.s("generic_secret", random_bytes_b64(f))
    b.t('\nDATABASE_URL="postgresql://app:')
    b.s("password_in_url", f.url_password())
    b.t('@localhost:5432/app?schema=public"\nGITHUB_ID=Iv1.')
    b.n("client_id", f.pick(HEX, 16))
    b.t("\nGITHUB_SECRET=")
    b.s("generic_secret", f.pick(HEX, 40))
    b.t("\nNEXT_PUBLIC_BUILD_SHA=")
    b.n("git_sha", f.git_sha())
    b.t("\n")


def k8s_secret(b: Snippet, f: Fake) -> None:
    b.t("apiVersion: v1\nkind: Secret\nmetadata:\n  name: billing-secrets\n  uid: ")
    b.n("uuid", f.uuid())
    b.t("\ntype: Opaque\nstringData:\n  STRIPE_SECRET_KEY: ")
    b.s("stripe_key", f.stripe_key())
    b.t('\n  WEBHOOK_SIGNING_SECRET: "')
    b.s("generic_secret", "whsec_" + f.pick(ALNUM, 32))
    b.t('"\ndata:\n  db-password: ')
    b.s("password", base64.b64encode(password(f).encode()).decode())
    b.t("\n")


def k8s_deployment(b: Snippet, f: Fake) -> None:
    b.t("      containers:\n      - name: api\n        image: registry.acme-corp.io/api@sha256:")
    b.n("sha256", f.sha256())
    b.t("\n        env:\n        - name: DB_PASSWORD\n          valueFrom:\n")
    b.t("            secretKeyRef:\n              name: ")
    b.n("secret_name", f.one(["app-secrets", "db-credentials", "api-env"]))
    b.t("\n              key: ")
    b.n("secret_name", f.one(["db-password", "password", "DB_PASSWORD"]))
    b.t('\n        - name: SENTRY_RELEASE\n          value: "')
    b.n("git_sha", f.git_sha())
    b.t('"\n        - name: INTERNAL_API_TOKEN\n          value: "')
    b.s("generic_secret", f.pick(ALNUM, 40))
    b.t('"\n')


def compose_env_list(b: Snippet, f: Fake) -> None:
    b.t("services:\n  db:\n    image: mysql:")
    b.n("version", f"8.0.{f.r.randrange(20, 40)}")
    b.t("\n    environment:\n      - MYSQL_ROOT_PASSWORD=")
    b.s("password", password(f))
    b.t("\n      - MYSQL_PASSWORD=")
    b.s("password", shell_password(f))
    b.t("\n      - MYSQL_PASSWORD_FILE=")
    b.n("path", "/run/secrets/db_password")
    b.t("\n  minio:\n    environment:\n      MINIO_ROOT_USER: admin\n      MINIO_ROOT_PASSWORD: ")
    b.s("password", password(f))
    b.t("\n    healthcheck:\n      interval: 30s\n")


def terraform_tfvars(b: Snippet, f: Fake) -> None:
    b.t('# terraform.tfvars\nregion               = "eu-west-1"\nami_id               = "ami-0')
    b.n("resource_id", f.pick(HEX, 16))
    b.t('"\ndb_password          = "')
    b.s("password", password(f))
    b.t('"\ndatadog_api_key      = "')
    b.s("generic_secret", f.pick(HEX, 32))
    b.t('"\ndatadog_app_key      = "')
    b.s("generic_secret", f.pick(HEX, 40))
    b.t('"\ncloudflare_api_token = "')
    b.s("generic_secret", f.pick(B64URL, 40))
    b.t('"\n')


def ansible_inventory(b: Snippet, f: Fake) -> None:
    b.t("[web]\nweb1.acme.internal ansible_user=deploy ansible_ssh_pass=")
    b.s("password", shell_password(f))
    b.t(" ansible_become_pass=")
    b.s("password", shell_password(f))
    b.t("\n\n[all:vars]\nansible_python_interpreter=/usr/bin/python3\n")
    b.t("# group_vars/all/vault.yml (forgot to encrypt it)\nvault_smtp_password: ")
    b.s("password", password(f))
    b.t("\n")


def ini_files(b: Snippet, f: Fake) -> None:
    b.t("$ cat ~/.my.cnf\n[client]\nuser=root\npassword=")
    b.s("password", password(f))
    b.t("\n$ cat ~/.pgpass\ndb.acme.internal:5432:*:reporting:")
    b.s("password", shell_password(f))
    b.t("\n$ psql -U reporting -h db.acme.internal\npsql: error: FATAL: SSL required\n")


def spring_oauth(b: Snippet, f: Fake) -> None:
    b.t("spring:\n  security:\n    oauth2:\n      client:\n        registration:\n")
    b.t("          github:\n            client-id: Iv1.")
    b.n("client_id", f.pick(HEX, 16))
    b.t("\n            client-secret: ")
    b.s("generic_secret", f.pick(HEX, 40))
    b.t("\n          okta:\n            client-id: 0oa")
    b.n("client_id", f.pick(ALNUM, 17))
    b.t("\n            client-secret: ")
    b.s("generic_secret", f.pick(B64URL, 40))
    b.t("\n")


def laravel_wordpress(b: Snippet, f: Fake) -> None:
    b.t("# .env (Laravel)\nAPP_KEY=base64:")
    b.s("generic_secret", random_bytes_b64(f))
    b.t("\nDB_PASSWORD=")
    b.s("password", password(f))
    b.t("\nPUSHER_APP_SECRET=")
    b.s("generic_secret", f.pick(HEX, 20))
    b.t("\n\n// wp-config.php\ndefine( 'DB_PASSWORD', '")
    b.s("password", password(f))
    b.t("' );\ndefine( 'AUTH_KEY',         '")
    b.s("generic_secret", f.pick(ALNUM + "!#$%&()*+,-./:;<=>?@[]^_`{|}~", 64))
    b.t("' );\ndefine( 'WP_DEBUG', false );\n")


def generic_assignments(b: Snippet, f: Fake) -> None:
    names = [
        "SIGNING_KEY",
        "ENCRYPTION_KEY",
        "MASTER_KEY",
        "HMAC_SECRET",
        "cookie_secret",
        "sessionSecret",
        "FERNET_KEY",
        "APP_SECRET",
        "SECRET_KEY_BASE",
        "CRYPT_KEY",
        "OAUTH_CLIENT_SECRET",
        "AUTH_SALT",
        "api_secret",
        "clientSecret",
    ]
    shapes: list[Callable[[str], tuple[str, str]]] = [
        lambda n: (f"{n}=", "\n"),
        lambda n: (f"{n}: ", "\n"),
        lambda n: (f'{n} = "', '"\n'),
        lambda n: (f'"{n}": "', '",\n'),
        lambda n: (f"export {n}='", "'\n"),
    ]
    b.t(f.one(["# secrets.auto.env\n", "why does the app say invalid signature?\n", ""]))
    for name in f.r.sample(names, 3):
        before, after = f.r.choice(shapes)(name)  # as f.one draws
        b.line(before, True, "generic_secret", generic_value(f), after)
    b.line("LOG_LEVEL=info\nBUILD_ID=", False, "uuid", f.uuid())


def vendor_env(b: Snippet, f: Fake) -> None:
    b.t("# ~/.zshrc\nexport PATH=$HOME/.local/bin:$PATH\n")
    for choice in f.r.sample(range(VENDORS), 3):
        name, kind, value = vendor_token(f, choice)
        b.line(f"export {name}=", True, kind, value)
    b.line("export TWILIO_ACCOUNT_SID=AC", False, "account_id", f.pick(HEX, 32))
    b.line("export TWILIO_AUTH_TOKEN=", True, "generic_secret", f.pick(HEX, 32))


CONFIG_TEMPLATES = (
    nextjs_env,
    k8s_secret,
    k8s_deployment,
    compose_env_list,
    terraform_tfvars,
    ansible_inventory,
    ini_files,
    spring_oauth,
    laravel_wordpress,
    generic_assignments,
    vendor_env,
)
