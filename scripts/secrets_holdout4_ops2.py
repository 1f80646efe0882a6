"""holdout4 templates: HTTP dumps, git, docker, kubectl and cloud CLI sessions."""

from __future__ import annotations

import base64
import json

from secrets_holdout4 import Fake, N, Part, S, Template, fill


def http_stripe_request(f: Fake) -> list[Part]:
    return fill(
        """
        POST /v1/payment_intents HTTP/1.1
        Host: api.stripe.com
        Authorization: Bearer {%key%}
        Idempotency-Key: {%idem%}
        Stripe-Version: 2024-06-20
        Content-Type: application/x-www-form-urlencoded

        amount=2000&currency=usd&customer={%cus%}
        """,
        key=S("stripe_secret_key", f.stripe_key()),
        idem=N("uuid", f.uuid()),
        cus=N("stripe_object_id", "cus_" + f.alnum(14)),
    )


def http_token_response(f: Fake) -> list[Part]:
    return fill(
        """
        HTTP/2 200
        content-type: application/json
        x-request-id: {%rid%}
        etag: W/"{%etag%}"

        {"access_token":"{%at%}","refresh_token":"{%rt%}","token_type":"Bearer","expires_in":3600}
        """,
        rid=N("request_id", f.hex(32)),
        etag=N("etag", f.hex(20)),
        at=S("access_token", f.jwt()),
        rt=S("refresh_token", f.urlsafe(64)),
    )


def http_set_cookie(f: Fake) -> list[Part]:
    return fill(
        """
        < HTTP/1.1 302 Found
        < Location: /dashboard
        < Set-Cookie: sessionid={%sid%}; Path=/; HttpOnly; Secure; SameSite=Lax
        < Set-Cookie: csrftoken={%csrf%}; Path=/; SameSite=Lax
        < Set-Cookie: theme=dark; Path=/
        < X-Trace-Id: {%tid%}
        """,
        sid=S("session_cookie", f.lower(32)),
        csrf=f.alnum(64),
        tid=N("trace_id", f.trace_id()),
    )


def http_cookie_request(f: Fake) -> list[Part]:
    return fill(
        """
        GET /settings/tokens HTTP/1.1
        Host: github.com
        Cookie: _octo=GH1.1.{%octo%}; logged_in=yes; user_session={%us%}; color_mode=auto
        User-Agent: Mozilla/5.0 (X11; Linux x86_64) Firefox/{%ver%}
        """,
        octo=N("analytics_cookie", f"{f.digits(9)}.{f.epoch()}"),
        us=S("session_cookie", f.urlsafe(48)),
        ver=N("version", f"{f.num(120, 135)}.0"),
    )


def http_rails_session_cookie(f: Fake) -> list[Part]:
    return fill(
        """
        Cookie: _shop_session={%sess%}; _ga=GA1.1.{%ga%}
        traceparent: 00-{%tid%}-{%span%}-01
        """,
        sess=S("session_cookie", f"{f.b64(120)}--{f.hex(40)}"),
        ga=N("analytics_cookie", f"{f.digits(10)}.{f.epoch()}"),
        tid=N("trace_id", f.trace_id()),
        span=N("span_id", f.span_id()),
    )


def git_remote_token(f: Fake) -> list[Part]:
    tok = f.gitlab_token()
    return fill(
        """
        $ git remote -v
        origin  https://oauth2:{%t1%}@gitlab.com/{%w%}/platform.git (fetch)
        origin  https://oauth2:{%t2%}@gitlab.com/{%w%}/platform.git (push)
        $ git push
        remote: HTTP Basic: Access denied
        """,
        t1=S("gitlab_token", tok),
        t2=S("gitlab_token", tok),
        w=f.word(),
    )


def git_clone_app_token(f: Fake) -> list[Part]:
    return fill(
        """
        $ git clone https://x-access-token:{%tok%}@github.com/acme/infra.git
        $ git log --oneline -3
        {%s1%} fix: pin terraform provider
        {%s2%} chore(deps): bump boto3 to {%ver%}
        {%s3%} Merge pull request #{%pr%} from acme/feat/queues
        """,
        tok=S("github_token", f.github_token("ghs_")),
        s1=N("git_sha", f.hex(7)),
        s2=N("git_sha", f.hex(7)),
        ver=N("semver", f"1.{f.num(30, 40)}.{f.num(0, 60)}"),
        s3=N("git_sha", f.hex(7)),
        pr=str(f.num(100, 4000)),
    )


def git_log_lookalike(f: Fake) -> list[Part]:
    return fill(
        """
        commit {%sha%}
        Merge: {%p1%} {%p2%}
        Author: {%name%} <{%name%}@example.com>
        Date:   Tue Mar 3 14:02:11 2026 +0100

            Rotate staging credentials (values live in Vault now)

            Change-Id: I{%cid%}
        """,
        sha=N("git_sha", f.git_sha()),
        p1=N("git_sha", f.hex(9)),
        p2=N("git_sha", f.hex(9)),
        name=f.first(),
        cid=N("gerrit_change_id", f.hex(40)),
    )


def git_diff_leak(f: Fake) -> list[Part]:
    return fill(
        """
        diff --git a/app/config.py b/app/config.py
        index {%a%}..{%b%} 100644
        --- a/app/config.py
        +++ b/app/config.py
        @@ -4,3 +4,3 @@ import os
        -COHERE_API_KEY = os.environ["{%name%}"]
        +COHERE_API_KEY = "{%key%}"
         TIMEOUT = 30
        """,
        a=N("git_sha", f.hex(7)),
        b=N("git_sha", f.hex(7)),
        name=N("env_var_name", "COHERE_API_KEY"),
        key=S("cohere_key", f.alnum(40)),
    )


def docker_login_cli(f: Fake) -> list[Part]:
    return fill(
        """
        $ echo "{%pat%}" | docker login ghcr.io -u {%user%} --password-stdin
        Login Succeeded
        $ docker login -u {%user2%} -p {%pw%} registry.example.net
        WARNING! Using --password via the CLI is insecure. Use --password-stdin.
        """,
        pat=S("github_token", f.github_token()),
        user=f.first(),
        user2=f.user(),
        pw=S("password", f.password()),
    )


def docker_ecr_login(f: Fake) -> list[Part]:
    doc = {"payload": f.b64(300), "datakey": f.b64(180), "version": "2", "type": "DATA_KEY"}
    ecr = base64.b64encode(json.dumps(doc).encode()).decode()
    acct = f.digits(12)
    return fill(
        """
        docker login --username AWS --password {%tok%} {%acct%}.dkr.ecr.{%region%}.amazonaws.com
        """,
        tok=S("ecr_token", ecr),
        acct=acct,
        region=f.region(),
    )


def docker_pull_lookalike(f: Fake) -> list[Part]:
    return fill(
        """
        $ docker pull ghcr.io/acme/api:{%ver%}
        {%l1%}: Pull complete
        {%l2%}: Pull complete
        Digest: {%digest%}
        Status: Downloaded newer image for ghcr.io/acme/api:{%ver%}
        """,
        ver=N("semver", f.semver()),
        l1=N("docker_layer_id", f.hex(12)),
        l2=N("docker_layer_id", f.hex(12)),
        digest=N("docker_digest", f.docker_digest()),
    )


def kubectl_get_secret(f: Fake) -> list[Part]:
    def enc(s: str) -> str:
        return base64.b64encode(s.encode()).decode()

    return fill(
        """
        $ kubectl get secret {%name%} -o yaml
        apiVersion: v1
        data:
          DB_PASSWORD: {%pw%}
          SENTRY_TOKEN: {%st%}
        kind: Secret
        metadata:
          creationTimestamp: "{%ts%}"
          resourceVersion: "{%rv%}"
          uid: {%uid%}
        """,
        name=N("k8s_name", f"{f.word()}-env"),
        pw=S("k8s_secret_b64", enc(f.password())),
        st=S("k8s_secret_b64", enc("sntrys_" + f.urlsafe(80))),
        ts=N("timestamp", f.timestamp()),
        rv=N("resource_version", f.digits(8)),
        uid=N("uuid", f.uuid()),
    )


def kubectl_create_secret(f: Fake) -> list[Part]:
    return fill(
        r"""
        kubectl -n payments create secret generic api-keys \
          --from-literal=STRIPE_KEY={%stripe%} \
          --from-literal=DB_PASS='{%pw%}' \
          --dry-run=client -o yaml | kubeseal > sealed.yaml
        """,
        stripe=S("stripe_restricted_key", f.stripe_key("rk_live_")),
        pw=S("password", f.password()),
    )


def kubectl_describe_lookalike(f: Fake) -> list[Part]:
    return fill(
        """
        Name:         {%pod%}
        Namespace:    prod
        Containers:
          api:
            Container ID:   containerd://{%cid%}
            Image ID:       ghcr.io/acme/api@{%digest%}
            State:          Waiting
              Reason:       CrashLoopBackOff
        """,
        pod=N("k8s_name", f.pod_name("api")),
        cid=N("container_id", f.sha256()),
        digest=N("docker_digest", f.docker_digest()),
    )


def aws_sts_assume_role(f: Fake) -> list[Part]:
    acct = f.digits(12)
    return fill(
        """
        $ aws sts assume-role --role-arn arn:aws:iam::{%acct%}:role/deploy --role-session-name ci
        {
            "Credentials": {
                "AccessKeyId": "{%kid%}",
                "SecretAccessKey": "{%sec%}",
                "SessionToken": "{%st%}",
                "Expiration": "{%exp%}"
            },
            "AssumedRoleUser": {
                "AssumedRoleId": "AROA{%rid%}:ci",
                "Arn": "{%arn%}"
            }
        }
        """,
        acct=acct,
        kid=S("aws_access_key_id", f.aws_key_id("ASIA")),
        sec=S("aws_secret_key", f.aws_secret()),
        st=S("aws_session_token", f.aws_session_token()),
        exp=N("timestamp", f.timestamp()),
        rid=f.upper(17),
        arn=N("aws_arn", f"arn:aws:sts::{acct}:assumed-role/deploy/ci"),
    )


def aws_configure_list(f: Fake) -> list[Part]:
    return fill(
        """
        $ aws configure list
              Name                    Value             Type    Location
              ----                    -----             ----    --------
           profile                  default           manual    --profile
        access_key     {%m1%} shared-credentials-file
        secret_key     {%m2%} shared-credentials-file
            region                {%region%}      config-file    ~/.aws/config
        """,
        m1=N("masked_value", "****************" + f.upper(4)),
        m2=N("masked_value", "****************" + f.alnum(4)),
        region=f.region(),
    )


def aws_secretsmanager_get(f: Fake) -> list[Part]:
    acct = f.digits(12)
    return fill(
        """
        {
            "ARN": "{%arn%}",
            "Name": "prod/orders/db",
            "VersionId": "{%vid%}",
            "SecretString": "{\\"username\\":\\"orders\\",\\"password\\":\\"{%pw%}\\"}",
            "CreatedDate": "{%ts%}"
        }
        """,
        arn=N("aws_arn", f"arn:aws:secretsmanager:us-east-1:{acct}:secret:prod/orders/db-AbCdEf"),
        vid=N("uuid", f.uuid()),
        pw=S("password", f.password()),
        ts=N("timestamp", f.timestamp()),
    )


def gcloud_access_token(f: Fake) -> list[Part]:
    return fill(
        """
        $ gcloud auth print-access-token
        {%tok%}
        $ gcloud config list --format="value(core.project)"
        {%proj%}
        """,
        tok=S("gcp_access_token", "ya29.a0" + f.urlsafe(200)),
        proj=f"{f.word()}-prod-{f.digits(6)}",
    )


def az_storage_keys(f: Fake) -> list[Part]:
    return fill(
        """
        $ az storage account keys list -g rg-data -n {%acct%} -o json
        [
          { "creationTime": "{%ts%}", "keyName": "key1", "permissions": "FULL",
            "value": "{%k1%}" },
          { "creationTime": "{%ts2%}", "keyName": "key2", "permissions": "FULL",
            "value": "{%k2%}" }
        ]
        """,
        acct=f"st{f.word()}{f.lower(4)}",
        ts=N("timestamp", f.timestamp()),
        k1=S("azure_storage_key", f.azure_storage_key()),
        ts2=N("timestamp", f.timestamp()),
        k2=S("azure_storage_key", f.azure_storage_key()),
    )


def az_login_sp(f: Fake) -> list[Part]:
    return fill(
        """
        az login --service-principal -u {%app%} -p {%sec%} --tenant {%tenant%}
        """,
        app=N("uuid", f.uuid()),
        sec=S("azure_client_secret", f.azure_secret()),
        tenant=N("uuid", f.uuid()),
    )


def heroku_config(f: Fake) -> list[Part]:
    return fill(
        """
        $ heroku config -a {%w%}-prod
        === {%w%}-prod Config Vars
        DATABASE_URL: postgres://{%u%}:{%pw%}@ec2-{%ip%}.compute-1.amazonaws.com:5432/{%db%}
        HEROKU_API_KEY: {%hk%}
        WEB_CONCURRENCY: 2
        """,
        w=f.word(),
        u=f.lower(14),
        pw=S("password", f.hex(64)),
        ip=f.ip().replace(".", "-"),
        db=f.lower(14),
        hk=S("heroku_api_key", f.uuid()),
    )


def vault_cli(f: Fake) -> list[Part]:
    return fill(
        """
        $ vault login {%tok%}
        Success! You are now authenticated.
        $ vault kv get -format=json secret/payments | jq .data
        {
          "data": { "api_secret": "{%sec%}" },
          "metadata": { "created_time": "{%ts%}", "version": 7 }
        }
        """,
        tok=S("vault_token", "hvs." + f.alnum(24)),
        sec=S("api_key", f.urlsafe(48)),
        ts=N("timestamp", f.timestamp()),
    )


def doppler_cli(f: Fake) -> list[Part]:
    return fill(
        """
        DOPPLER_TOKEN={%tok%} doppler run --project {%w%} --config prd -- node server.js
        """,
        tok=S("doppler_token", f"dp.st.prd.{f.alnum(43)}"),
        w=f.word(),
    )


def npm_publish_output(f: Fake) -> list[Part]:
    return fill(
        """
        $ npm config set //registry.npmjs.org/:_authToken {%tok%}
        $ npm publish
        npm notice package: @acme/ui@{%ver%}
        npm notice shasum: {%sha1%}
        npm notice integrity: {%sri%}
        """,
        tok=S("npm_token", "npm_" + f.alnum(36)),
        ver=N("semver", f.semver()),
        sha1=N("sha1", f.hex(40)),
        sri=N("sri_hash", "sha512-" + f.b64(64)[:20] + "[...]" + f.b64(3)),
    )


OPS2_TEMPLATES: list[tuple[str, Template]] = [
    ("http", http_stripe_request),
    ("http", http_token_response),
    ("http", http_set_cookie),
    ("http", http_cookie_request),
    ("http", http_rails_session_cookie),
    ("git", git_remote_token),
    ("git", git_clone_app_token),
    ("git", git_log_lookalike),
    ("git", git_diff_leak),
    ("docker_cli", docker_login_cli),
    ("docker_cli", docker_ecr_login),
    ("docker_cli", docker_pull_lookalike),
    ("kubectl", kubectl_get_secret),
    ("kubectl", kubectl_create_secret),
    ("kubectl", kubectl_describe_lookalike),
    ("aws_cli", aws_sts_assume_role),
    ("aws_cli", aws_configure_list),
    ("aws_cli", aws_secretsmanager_get),
    ("gcloud", gcloud_access_token),
    ("azure_cli", az_storage_keys),
    ("azure_cli", az_login_sp),
    ("heroku_cli", heroku_config),
    ("vault_cli", vault_cli),
    ("shell", doppler_cli),
    ("npm_cli", npm_publish_output),
]
