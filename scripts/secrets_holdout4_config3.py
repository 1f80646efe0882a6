"""holdout4 templates: build-tool, registry and cloud credential files."""

from __future__ import annotations

import base64

from secrets_holdout4 import Fake, N, Part, S, Template, fill


def maven_settings(f: Fake) -> list[Part]:
    return fill(
        """
        <settings>
          <servers>
            <server>
              <id>nexus-releases</id>
              <username>deploy</username>
              <password>{%pw%}</password>
            </server>
          </servers>
          <mirrors>
            <mirror><id>central</id><url>{%url%}</url><mirrorOf>*</mirrorOf></mirror>
          </mirrors>
        </settings>
        """,
        pw=S("password", f.password()),
        url=N("url", "https://nexus.example.net/repository/maven-public/"),
    )


def gradle_properties(f: Fake) -> list[Part]:
    return fill(
        """
        org.gradle.jvmargs=-Xmx4g -Dfile.encoding=UTF-8
        ossrhUsername={%user%}
        ossrhPassword={%pw%}
        signing.keyId={%kid%}
        signing.password={%sp%}
        signing.secretKeyRingFile=/home/{%user%}/.gnupg/secring.gpg
        """,
        user=f.first(),
        pw=S("password", f.password()),
        kid=N("gpg_key_id", f.hex(8).upper()),
        sp=S("passphrase", f.passphrase()),
    )


def yarnrc_yml(f: Fake) -> list[Part]:
    return fill(
        """
        nodeLinker: node-modules
        npmRegistryServer: "{%url%}"
        npmAuthToken: "{%tok%}"
        yarnPath: .yarn/releases/yarn-{%ver%}.cjs
        """,
        url=N("url", "https://registry.npmjs.org"),
        tok=S("npm_token", "npm_" + f.alnum(36)),
        ver=N("semver", f"4.{f.num(0, 9)}.{f.num(0, 9)}"),
    )


def docker_config_json(f: Fake) -> list[Part]:
    raw = f"{f.first()}:{f.github_token()}".encode()
    return fill(
        """
        {
          "auths": {
            "ghcr.io": {
              "auth": "{%auth%}"
            }
          },
          "credsStore": "desktop"
        }
        """,
        auth=S("docker_auth", base64.b64encode(raw).decode()),
    )


def kubeconfig_user(f: Fake) -> list[Part]:
    claims = {"iss": "kubernetes/serviceaccount", "sub": f"system:serviceaccount:ci:{f.word()}"}
    return fill(
        """
        apiVersion: v1
        kind: Config
        clusters:
        - cluster:
            certificate-authority-data: {%ca%}
            server: https://{%ip%}:6443
          name: prod
        users:
        - name: ci-bot
          user:
            token: {%tok%}
        """,
        ca=N("certificate_b64", base64.b64encode(f.cert_pem().encode()).decode()),
        ip=f.ip(),
        tok=S("k8s_token", f.jwt(claims)),
    )


def aws_credentials_file(f: Fake) -> list[Part]:
    return fill(
        """
        [default]
        aws_access_key_id = {%kid%}
        aws_secret_access_key = {%sec%}

        [prod]
        role_arn = {%arn%}
        source_profile = default
        """,
        kid=S("aws_access_key_id", f.aws_key_id()),
        sec=S("aws_secret_key", f.aws_secret()),
        arn=N("aws_arn", f"arn:aws:iam::{f.digits(12)}:role/{f.word()}-admin"),
    )


def gcp_service_account(f: Fake) -> list[Part]:
    proj = f"{f.word()}-{f.digits(6)}"
    key = f.pkcs8_private().replace("\n", "\\n") + "\\n"
    return fill(
        """
        {
          "type": "service_account",
          "project_id": "{%proj%}",
          "private_key_id": "{%kid%}",
          "private_key": "{%key%}",
          "client_email": "deployer@{%proj%}.iam.gserviceaccount.com",
          "client_id": "{%cid%}",
          "token_uri": "{%uri%}"
        }
        """,
        proj=proj,
        kid=f.hex(40),
        key=S("private_key", key),
        cid=f.digits(21),
        uri=N("url", "https://oauth2.googleapis.com/token"),
    )


def azure_sp_json(f: Fake) -> list[Part]:
    return fill(
        """
        $ az ad sp create-for-rbac --name gh-deployer --scopes /subscriptions/{%sub%}
        {
          "appId": "{%app%}",
          "displayName": "gh-deployer",
          "password": "{%pw%}",
          "tenant": "{%tenant%}"
        }
        """,
        sub=N("uuid", f.uuid()),
        app=N("uuid", f.uuid()),
        pw=S("azure_client_secret", f.azure_secret()),
        tenant=N("uuid", f.uuid()),
    )


def composer_auth_json(f: Fake) -> list[Part]:
    return fill(
        """
        {
            "github-oauth": { "github.com": "{%gh%}" },
            "http-basic": {
                "repo.packagist.com": { "username": "token", "password": "{%pk%}" }
            }
        }
        """,
        gh=S("github_token", f.github_token("gho_")),
        pk=S("packagist_token", f.hex(40)),
    )


def registry_credentials_misc(f: Fake) -> list[Part]:
    return fill(
        """
        # ~/.cargo/credentials.toml
        [registry]
        token = "{%cargo%}"

        # ~/.gem/credentials
        ---
        :rubygems_api_key: {%gem%}
        """,
        cargo=S("cargo_token", "cio" + f.alnum(32)),
        gem=S("rubygems_key", "rubygems_" + f.hex(48)),
    )


def nuget_config(f: Fake) -> list[Part]:
    return fill(
        """
        <configuration>
          <packageSources>
            <add key="nuget.org" value="{%url%}" />
            <add key="acme" value="https://pkgs.example.net/nuget/v3/index.json" />
          </packageSources>
          <packageSourceCredentials>
            <acme>
              <add key="Username" value="build" />
              <add key="ClearTextPassword" value="{%pat%}" />
            </acme>
          </packageSourceCredentials>
          <apikeys><add key="https://www.nuget.org" value="{%api%}" /></apikeys>
        </configuration>
        """,
        url=N("url", "https://api.nuget.org/v3/index.json"),
        pat=S("azure_devops_pat", f.chars("abcdefghijklmnopqrstuvwxyz234567", 52)),
        api=S("nuget_key", "oy2" + f.lower(43)),
    )


def sentry_properties(f: Fake) -> list[Part]:
    return fill(
        """
        defaults.url=https://sentry.io/
        defaults.org={%w%}
        defaults.project=android
        auth.token={%tok%}
        """,
        w=f.word(),
        tok=S("sentry_auth_token", f"sntrys_eyJpYXQiOjE3{f.urlsafe(120)}_{f.urlsafe(43)}"),
    )


def terraformrc(f: Fake) -> list[Part]:
    return fill(
        """
        credentials "app.terraform.io" {
          token = "{%tok%}"
        }
        plugin_cache_dir = "{%path%}"
        """,
        tok=S("terraform_cloud_token", f"{f.alnum(14)}.atlasv1.{f.alnum(67)}"),
        path=N("file_path", "$HOME/.terraform.d/plugin-cache"),
    )


def git_credentials_pgpass(f: Fake) -> list[Part]:
    return fill(
        """
        $ cat ~/.git-credentials
        https://{%user%}:{%gh%}@github.com
        $ cat ~/.pgpass
        {%host%}:5432:orders:{%user2%}:{%pw%}
        """,
        user=f.first(),
        gh=S("github_token", f.github_token()),
        host=f.host(),
        user2=f.user(),
        pw=S("password", f.password()),
    )


def my_cnf_redis_conf(f: Fake) -> list[Part]:
    return fill(
        """
        # /etc/mysql/conf.d/client.cnf
        [client]
        user=root
        password="{%pw%}"

        # redis.conf
        requirepass {%rp%}
        masterauth {%rp2%}
        """,
        pw=S("password", f.password()),
        rp=S("password", f.alnum(40)),
        rp2=S("password", f.alnum(40)),
    )


def google_services_json(f: Fake) -> list[Part]:
    num = f.digits(12)
    return fill(
        """
        {
          "project_info": { "project_number": "{%num%}", "project_id": "{%w%}-mobile" },
          "client": [{
            "client_info": { "mobilesdk_app_id": "1:{%num%}:android:{%app%}" },
            "api_key": [{ "current_key": "{%key%}" }]
          }]
        }
        """,
        num=num,
        w=f.word(),
        app=f.hex(16),
        key=S("google_api_key", f.google_key()),
    )


def vscode_settings(f: Fake) -> list[Part]:
    return fill(
        """
        {
          "editor.fontSize": 13,
          "workbench.colorCustomizations": { "statusBar.background": "{%c1%}" },
          "python.defaultInterpreterPath": "{%path%}",
          "rest-client.environmentVariables": {
            "prod": { "baseUrl": "https://api.example.com", "token": "{%tok%}" }
          }
        }
        """,
        c1=N("css_color", f.css_color()),
        path=N("file_path", "${workspaceFolder}/.venv/bin/python"),
        tok=S("bearer_token", f.urlsafe(43)),
    )


CONFIG3_TEMPLATES: list[tuple[str, Template]] = [
    ("maven_settings", maven_settings),
    ("gradle", gradle_properties),
    ("yaml", yarnrc_yml),
    ("json", docker_config_json),
    ("kubeconfig", kubeconfig_user),
    ("ini", aws_credentials_file),
    ("json", gcp_service_account),
    ("azure_cli", azure_sp_json),
    ("json", composer_auth_json),
    ("toml", registry_credentials_misc),
    ("xml", nuget_config),
    ("properties", sentry_properties),
    ("hcl", terraformrc),
    ("shell", git_credentials_pgpass),
    ("ini", my_cnf_redis_conf),
    ("json", google_services_json),
    ("json", vscode_settings),
]
