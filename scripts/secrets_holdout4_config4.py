"""holdout4 templates: web servers, DSNs, observability and misc infra config."""

from __future__ import annotations

import base64
import json

from secrets_holdout4 import Fake, N, Part, S, Template, fill


def nginx_upstream_auth(f: Fake) -> list[Part]:
    raw = f"{f.user()}:{f.password()}".encode()
    return fill(
        """
        server {
            listen 443 ssl;
            ssl_certificate     {%crt%};
            ssl_certificate_key /etc/nginx/tls/api.key;
            location /internal/ {
                proxy_pass http://10.0.3.17:8080;
                proxy_set_header Authorization "Basic {%b64%}";
            }
        }
        """,
        crt=N("file_path", "/etc/nginx/tls/api.crt"),
        b64=S("basic_auth", base64.b64encode(raw).decode()),
    )


def nginx_csp_lookalike(f: Fake) -> list[Part]:
    return fill(
        """
        add_header Content-Security-Policy "script-src 'self' 'sha256-{%h1%}'";
        add_header X-Build "{%build%}";
        location = /app.{%hash%}.js { expires 1y; }
        """,
        h1=N("csp_hash", f.b64(32)),
        build=N("build_number", str(f.num(1000, 99999))),
        hash=N("content_hash", f.hex(8)),
    )


def apache_setenv(f: Fake) -> list[Part]:
    return fill(
        """
        <VirtualHost *:443>
            ServerName app.example.com
            SetEnv NEW_RELIC_LICENSE_KEY {%nr%}
            SetEnv SMTP_PASSWORD "{%pw%}"
            AuthUserFile {%path%}
        </VirtualHost>
        """,
        nr=S("newrelic_license_key", f.hex(36) + "NRAL"),
        pw=S("smtp_password", f.password()),
        path=N("file_path", "/etc/apache2/.htpasswd"),
    )


def jdbc_sqlserver(f: Fake) -> list[Part]:
    return fill(
        """
        jdbc:sqlserver://{%host%}:1433;databaseName=erp;user=sa;password={%pw%};encrypt=true;
        """,
        host=f.host(),
        pw=S("password", f.password()),
    )


def odbc_string(f: Fake) -> list[Part]:
    return fill(
        """
        conn_str = (
            "Driver={ODBC Driver 18 for SQL Server};"
            "Server=tcp:{%host%},1433;Database=dw;"
            "Uid={%user%};Pwd={{%pw%}};Encrypt=yes;"
        )
        """,
        host=f.host(),
        user=f.user(),
        pw=S("password", f.password()),
    )


def amqp_url(f: Fake) -> list[Part]:
    return fill(
        """
        CELERY_BROKER_URL = "amqps://{%user%}:{%pw%}@b-{%bid%}.mq.{%region%}.amazonaws.com:5671"
        """,
        user=f.user(),
        pw=S("password", f.password()),
        bid=N("uuid", f.uuid()),
        region=f.region(),
    )


def kafka_client_properties(f: Fake) -> list[Part]:
    return fill(
        """
        bootstrap.servers={%w%}-kafka-1.example.net:9093
        security.protocol=SASL_SSL
        sasl.mechanism=SCRAM-SHA-512
        sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
          username="{%user%}" password="{%pw%}";
        ssl.truststore.password={%tpw%}
        """,
        w=f.word(),
        user=f.user(),
        pw=S("password", f.password()),
        tpw=S("keystore_password", f.password()),
    )


def elastic_kibana_yml(f: Fake) -> list[Part]:
    cid = (
        f"{f.word()}:"
        + base64.b64encode(f"{f.region()}.aws.found.io${f.hex(32)}${f.hex(32)}".encode()).decode()
    )
    return fill(
        """
        elasticsearch.username: kibana_system
        elasticsearch.password: {%pw%}
        xpack.encryptedSavedObjects.encryptionKey: "{%ek%}"
        cloud.id: "{%cid%}"
        """,
        pw=S("password", f.password()),
        ek=S("encryption_key", f.alnum(32)),
        cid=N("elastic_cloud_id", cid),
    )


def cloud_init(f: Fake) -> list[Part]:
    return fill(
        """
        #cloud-config
        chpasswd:
          list: |
            root:{%pw%}
          expire: false
        ssh_authorized_keys:
          - {%pub%}
        """,
        pw=S("password", f.password()),
        pub=N("ssh_public_key", f.ssh_rsa_pub()),
    )


def systemd_unit(f: Fake) -> list[Part]:
    return fill(
        """
        [Service]
        Environment="DD_API_KEY={%dd%}"
        Environment="DD_SITE=datadoghq.eu"
        ExecStart={%path%} --config /etc/{%w%}/agent.yaml
        Restart=always
        """,
        dd=S("datadog_api_key", f.hex(32)),
        path=N("file_path", f"/opt/{f.word()}/bin/agent"),
        w=f.word(),
    )


def alertmanager_config(f: Fake) -> list[Part]:
    return fill(
        """
        global:
          slack_api_url: '{%hook%}'
        receivers:
          - name: oncall
            pagerduty_configs:
              - routing_key: {%pd%}
            slack_configs:
              - channel: '#alerts-{%w%}'
        """,
        hook=S("slack_webhook", f.slack_webhook()),
        pd=S("pagerduty_key", f.hex(32)),
        w=f.word(),
    )


def grafana_datasource(f: Fake) -> list[Part]:
    return fill(
        """
        apiVersion: 1
        datasources:
          - name: Postgres
            type: postgres
            url: {%host%}:5432
            user: grafana
            secureJsonData:
              password: {%pw%}
          - name: Loki
            basicAuthUser: {%uid%}
            secureJsonData:
              basicAuthPassword: {%glc%}
        """,
        host=f.host(),
        pw=S("password", f.password()),
        uid=f.digits(6),
        glc=S("grafana_token", "glc_" + f.b64(90).rstrip("=")),
    )


def traefik_compose(f: Fake) -> list[Part]:
    return fill(
        """
        traefik:
          image: traefik:v{%ver%}
          command:
            - --certificatesresolvers.le.acme.dnschallenge.provider=cloudflare
            - --certificatesresolvers.le.acme.email={%email%}
          environment:
            CF_DNS_API_TOKEN: {%tok%}
        """,
        ver=N("semver", f"3.{f.num(0, 3)}.{f.num(0, 9)}"),
        email=f.email(),
        tok=S("cloudflare_api_token", f.urlsafe(40)),
    )


def wireguard_conf(f: Fake) -> list[Part]:
    return fill(
        """
        [Interface]
        PrivateKey = {%priv%}
        Address = 10.8.0.2/24

        [Peer]
        PublicKey = {%pub%}
        Endpoint = vpn.example.com:51820
        AllowedIPs = 0.0.0.0/0
        """,
        priv=S("wireguard_private_key", f.b64(32)),
        pub=N("wireguard_public_key", f.b64(32)),
    )


def snowflake_config(f: Fake) -> list[Part]:
    return fill(
        """
        [connections.prod]
        accountname = "{%acct%}"
        username = "{%user%}"
        password = "{%pw%}"
        warehouse = "ANALYTICS_WH"
        """,
        acct=f"{f.lower(7)}-{f.lower(7)}",
        user=f.user().upper(),
        pw=S("password", f.password()),
    )


def json_feature_flags_lookalike(f: Fake) -> list[Part]:
    doc = {"flags": {"new_checkout": True}, "etag": "@@1", "generated": "@@2", "schema": "@@3"}
    text = json.dumps(doc, indent=2)
    pre, rest = text.split("@@1")
    mid, rest = rest.split("@@2")
    mid2, post = rest.split("@@3")
    return [
        pre,
        N("etag", f.md5()),
        mid,
        N("timestamp", f.timestamp()),
        mid2,
        N("url", "https://json-schema.example.com/flags/v2.json"),
        post + "\n",
    ]


CONFIG4_TEMPLATES: list[tuple[str, Template]] = [
    ("nginx", nginx_upstream_auth),
    ("nginx", nginx_csp_lookalike),
    ("apache", apache_setenv),
    ("jdbc", jdbc_sqlserver),
    ("odbc", odbc_string),
    ("amqp", amqp_url),
    ("properties", kafka_client_properties),
    ("yaml", elastic_kibana_yml),
    ("yaml", cloud_init),
    ("systemd", systemd_unit),
    ("yaml", alertmanager_config),
    ("yaml", grafana_datasource),
    ("docker_compose", traefik_compose),
    ("ini", wireguard_conf),
    ("toml", snowflake_config),
    ("json", json_feature_flags_lookalike),
]
