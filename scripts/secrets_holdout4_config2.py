"""holdout4 templates: Terraform, Docker, Kubernetes, Helm, Ansible, web servers, DSNs."""

from __future__ import annotations

import base64

from secrets_holdout4 import Fake, N, Part, S, Template, fill


def tf_provider_aws(f: Fake) -> list[Part]:
    return fill(
        """
        provider "aws" {
          region     = "{%region%}"
          access_key = "{%kid%}"
          secret_key = "{%sec%}"
        }

        resource "aws_instance" "bastion" {
          ami           = "{%ami%}"
          instance_type = "t3.micro"
        }
        """,
        region=f.region(),
        kid=S("aws_access_key_id", f.aws_key_id()),
        sec=S("aws_secret_key", f.aws_secret()),
        ami=N("aws_ami_id", "ami-0" + f.hex(16)),
    )


def tf_tfvars(f: Fake) -> list[Part]:
    return fill(
        """
        # prod.tfvars
        environment     = "prod"
        db_password     = "{%pw%}"
        datadog_api_key = "{%dd%}"
        datadog_app_key = "{%ddapp%}"
        vpc_cidr        = "10.40.0.0/16"
        """,
        pw=S("password", f.password()),
        dd=S("datadog_api_key", f.hex(32)),
        ddapp=S("datadog_app_key", f.hex(40)),
    )


def tf_state_excerpt(f: Fake) -> list[Part]:
    acct = f.digits(12)
    return fill(
        """
        {
          "version": 4,
          "terraform_version": "{%tfv%}",
          "serial": {%serial%},
          "lineage": "{%lineage%}",
          "resources": [{
            "type": "aws_db_instance",
            "instances": [{
              "attributes": {
                "arn": "arn:aws:rds:{%region%}:{%acct%}:db:orders-prod",
                "username": "dbadmin",
                "password": "{%pw%}"
              }
            }]
          }]
        }
        """,
        tfv=N("semver", f"1.{f.num(5, 9)}.{f.num(0, 5)}"),
        serial=str(f.num(3, 400)),
        lineage=N("uuid", f.uuid()),
        region=f.region(),
        acct=acct,
        pw=S("password", f.password()),
    )


def tf_cloudflare(f: Fake) -> list[Part]:
    return fill(
        """
        provider "cloudflare" {
          api_token = "{%tok%}"
        }

        resource "cloudflare_record" "www" {
          zone_id = "{%zone%}"
          name    = "www"
          value   = "203.0.113.10"
          type    = "A"
        }
        """,
        tok=S("cloudflare_api_token", f.urlsafe(40)),
        zone=N("cloudflare_zone_id", f.hex(32)),
    )


def dockerfile_npm_token(f: Fake) -> list[Part]:
    return fill(
        """
        FROM node:20-alpine@{%digest%}
        ARG NPM_TOKEN={%tok%}
        WORKDIR /app
        COPY package*.json ./
        RUN echo "//registry.npmjs.org/:_authToken=${NPM_TOKEN}" > .npmrc && npm ci && rm .npmrc
        """,
        digest=N("docker_digest", f.docker_digest()),
        tok=S("npm_token", "npm_" + f.alnum(36)),
    )


def dockerfile_env_secret(f: Fake) -> list[Part]:
    return fill(
        """
        FROM python:{%pyv%}-slim
        ENV PYTHONUNBUFFERED=1 \\
            DJANGO_SECRET_KEY={%key%} \\
            SENTRY_RELEASE={%sha%}
        COPY . /srv/app
        CMD ["gunicorn", "app.wsgi", "-b", "0.0.0.0:8000"]
        """,
        pyv=N("version", f"3.{f.num(10, 13)}.{f.num(0, 9)}"),
        key=S("django_secret_key", f.alnum(50)),
        sha=N("git_sha", f.git_sha()),
    )


def compose_postgres_minio(f: Fake) -> list[Part]:
    return fill(
        """
        services:
          db:
            image: postgres:{%pgv%}
            environment:
              POSTGRES_USER: app
              POSTGRES_PASSWORD: {%pw%}
          minio:
            image: minio/minio:RELEASE.{%rel%}
            environment:
              MINIO_ROOT_USER: admin
              MINIO_ROOT_PASSWORD: "{%mpw%}"
        """,
        pgv=N("version", f"16.{f.num(1, 6)}"),
        pw=S("password", f.password()),
        rel=N("version", f"2026-0{f.num(1, 9)}-1{f.num(0, 9)}T00-00-00Z"),
        mpw=S("password", f.password()),
    )


def compose_mongo_express(f: Fake) -> list[Part]:
    pw = f.password()
    return fill(
        """
        mongo:
          image: mongo:7
          environment:
            - MONGO_INITDB_ROOT_USERNAME=root
            - MONGO_INITDB_ROOT_PASSWORD={%pw%}
        mongo-express:
          environment:
            - ME_CONFIG_MONGODB_URL=mongodb://root:{%pw2%}@mongo:27017/
        """,
        pw=S("password", pw),
        pw2=S("password", pw),
    )


def k8s_secret_data(f: Fake) -> list[Part]:
    def enc(s: str) -> str:
        return base64.b64encode(s.encode()).decode()

    return fill(
        """
        apiVersion: v1
        kind: Secret
        metadata:
          name: {%name%}
          uid: {%uid%}
        type: Opaque
        data:
          username: {%user%}
          password: {%pw%}
          api-key: {%key%}
        """,
        name=N("k8s_name", f"{f.word()}-db-credentials"),
        uid=N("uuid", f.uuid()),
        user=enc(f.user()),
        pw=S("k8s_secret_b64", enc(f.password())),
        key=S("k8s_secret_b64", enc(f.stripe_key())),
    )


def k8s_secret_stringdata(f: Fake) -> list[Part]:
    return fill(
        """
        apiVersion: v1
        kind: Secret
        metadata:
          name: api-env
        stringData:
          DATABASE_URL: "postgres://{%user%}:{%pw%}@{%host%}:5432/api"
          SLACK_BOT_TOKEN: "{%slack%}"
          LOG_FORMAT: json
        """,
        user=f.user(),
        pw=S("password", f.password()),
        host=f.host(),
        slack=S("slack_bot_token", f.slack_bot()),
    )


def k8s_deployment_env(f: Fake) -> list[Part]:
    return fill(
        """
        containers:
          - name: worker
            image: ghcr.io/acme/worker@{%digest%}
            env:
              - name: OPENAI_API_KEY
                value: "{%key%}"
              - name: DB_PASSWORD
                valueFrom:
                  secretKeyRef:
                    name: {%ref%}
                    key: password
        """,
        digest=N("docker_digest", f.docker_digest()),
        key=S("openai_key", f.openai_key()),
        ref=N("k8s_name", f"{f.word()}-postgres"),
    )


def helm_values(f: Fake) -> list[Part]:
    return fill(
        """
        image:
          repository: registry.example.net/shop/api
          tag: "{%tag%}"
        postgresql:
          auth:
            username: shop
            password: {%pw%}
        redis:
          auth:
            password: "{%rpw%}"
        """,
        tag=N("semver", f.semver()),
        pw=S("password", f.password()),
        rpw=S("password", f.password()),
    )


def helm_template_lookalike(f: Fake) -> list[Part]:
    return fill(
        """
        metadata:
          annotations:
            checksum/config: {%sum%}
        data:
          api-key: {{ .Values.apiKey | b64enc | quote }}
          password: {{ required "set .Values.db.password" .Values.db.password | b64enc }}
        # placeholder in values.yaml: apiKey: "{%ph%}"
        """,
        sum=N("sha256", f.sha256()),
        ph=N("placeholder", f.pick(("CHANGE_ME_IN_SECRETS_REPO", "<set-in-ci>", "REPLACE_ME"))),
    )


def ansible_group_vars(f: Fake) -> list[Part]:
    lines = "\n  ".join(f.hex(80) for _ in range(4))
    return fill(
        """
        ansible_user: deploy
        ansible_become_password: {%bp%}
        app_db_password: "{%pw%}"
        vault_smtp_password: !vault |
          $ANSIBLE_VAULT;1.1;AES256
          {%blob%}
        """,
        bp=S("password", f.password()),
        pw=S("password", f.password()),
        blob=N("vault_ciphertext", lines),
    )


def ansible_inventory(f: Fake) -> list[Part]:
    return fill(
        """
        [db]
        {%w%}-db1 ansible_host={%ip%} ansible_user=admin ansible_password={%pw%}

        [web]
        {%w%}-web1 ansible_host={%ip2%} ansible_ssh_private_key_file={%key%}
        """,
        w=f.word(),
        ip=f.ip(),
        pw=S("password", f.password()),
        ip2=f.ip(),
        key=N("file_path", "~/.ssh/deploy_ed25519"),
    )


CONFIG2_TEMPLATES: list[tuple[str, Template]] = [
    ("terraform", tf_provider_aws),
    ("terraform", tf_tfvars),
    ("terraform", tf_state_excerpt),
    ("terraform", tf_cloudflare),
    ("dockerfile", dockerfile_npm_token),
    ("dockerfile", dockerfile_env_secret),
    ("docker_compose", compose_postgres_minio),
    ("docker_compose", compose_mongo_express),
    ("k8s", k8s_secret_data),
    ("k8s", k8s_secret_stringdata),
    ("k8s", k8s_deployment_env),
    ("helm", helm_values),
    ("helm", helm_template_lookalike),
    ("ansible", ansible_group_vars),
    ("ansible", ansible_inventory),
]
