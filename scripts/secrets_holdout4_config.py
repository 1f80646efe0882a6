"""holdout4 templates: dotenv, app config files and package-manager credential files."""

from __future__ import annotations

import base64

from secrets_holdout4 import Fake, N, Part, S, Template, fill


def dotenv_app(f: Fake) -> list[Part]:
    return fill(
        """
        NODE_ENV=production
        PORT=3000
        LOG_LEVEL=info
        DATABASE_URL=postgres://{%user%}:{%pw%}@{%host%}:5432/app
        REDIS_URL=rediss://default:{%rpw%}@{%rhost%}:6379
        STRIPE_SECRET_KEY={%stripe%}
        PUBLIC_ASSET_BASE={%url%}
        """,
        user=f.user(),
        pw=S("password", f.password()),
        host=f.host(),
        rpw=S("password", f.alnum(32)),
        rhost=f.host(),
        stripe=S("stripe_secret_key", f.stripe_key()),
        url=N("url", f"https://cdn.example.com/{f.word()}/assets"),
    )


def dotenv_example(f: Fake) -> list[Part]:
    return fill(
        """
        # .env.example - copy to .env and fill in
        OPENAI_API_KEY={%p1%}
        STRIPE_SECRET_KEY={%p2%}
        DATABASE_URL=postgres://USER:{%p3%}@localhost:5432/app
        SENTRY_ENVIRONMENT=development
        """,
        p1=N("placeholder", f.pick(("<your-openai-key>", "sk-...", "YOUR_API_KEY_HERE"))),
        p2=N("placeholder", "sk_test_xxxxxxxxxxxxxxxxxxxxxxxx"),
        p3=N("placeholder", "PASSWORD"),
    )


def dotenv_ai_keys(f: Fake) -> list[Part]:
    return fill(
        """
        ANTHROPIC_API_KEY={%ant%}
        OPENAI_API_KEY={%oai%}
        GROQ_API_KEY={%groq%}
        MISTRAL_API_KEY={%mis%}
        PERPLEXITY_API_KEY={%ppl%}
        XAI_API_KEY={%xai%}
        DEFAULT_MODEL=claude-sonnet-4-5
        """,
        ant=S("anthropic_key", f.anthropic_key()),
        oai=S("openai_key", f.openai_key()),
        groq=S("groq_key", "gsk_" + f.alnum(52)),
        mis=S("mistral_key", f.alnum(32)),
        ppl=S("perplexity_key", "pplx-" + f.alnum(48)),
        xai=S("xai_key", "xai-" + f.alnum(80)),
    )


def dotenv_quoted_exports(f: Fake) -> list[Part]:
    return fill(
        """
        export SENDGRID_API_KEY="{%sg%}"
        export TWILIO_AUTH_TOKEN='{%tw%}'
        export ELEVENLABS_API_KEY={%el%}
        export FEATURE_FLAGS="beta,{%w%}"
        """,
        sg=S("sendgrid_key", f.sendgrid_key()),
        tw=S("twilio_auth_token", f.hex(32)),
        el=S("elevenlabs_key", "sk_" + f.hex(48)),
        w=f.word(),
    )


def dotenv_laravel(f: Fake) -> list[Part]:
    return fill(
        """
        APP_NAME=Shop
        APP_KEY=base64:{%key%}
        DB_CONNECTION=mysql
        DB_PASSWORD={%pw%}
        MAIL_PASSWORD={%mpw%}
        PUSHER_APP_ID={%app%}
        PUSHER_APP_SECRET={%ps%}
        """,
        key=S("encryption_key", f.b64(32)),
        pw=S("password", f.password()),
        mpw=S("smtp_password", f.password()),
        app=f.digits(7),
        ps=S("pusher_secret", f.hex(20)),
    )


def dotenv_nextauth(f: Fake) -> list[Part]:
    return fill(
        """
        AUTH0_SECRET='{%s1%}'
        AUTH0_BASE_URL='http://localhost:3000'
        AUTH0_ISSUER_BASE_URL='https://{%w%}.us.auth0.com'
        AUTH0_CLIENT_ID='{%cid%}'
        AUTH0_CLIENT_SECRET='{%cs%}'
        NEXTAUTH_SECRET={%na%}
        GOOGLE_CLIENT_SECRET={%g%}
        """,
        s1=S("session_secret", f.hex(64)),
        w=f.word(),
        cid=f.alnum(32),
        cs=S("oauth_client_secret", f.urlsafe(64)),
        na=S("session_secret", f.b64(32)),
        g=S("oauth_client_secret", "GOCSPX-" + f.urlsafe(28)),
    )


def dotenv_misc_saas(f: Fake) -> list[Part]:
    return fill(
        """
        PLAID_CLIENT_ID={%pcid%}
        PLAID_SECRET={%plaid%}
        ALGOLIA_APP_ID={%alg_id%}
        ALGOLIA_ADMIN_KEY={%alg%}
        MAPBOX_SECRET_TOKEN={%mb%}
        ASANA_PAT={%asana%}
        """,
        pcid=f.hex(24),
        plaid=S("plaid_secret", f.hex(30)),
        alg_id=f.upper(10),
        alg=S("algolia_admin_key", f.hex(32)),
        mb=S("mapbox_secret_token", f"sk.eyJ1IjoiYWNtZ{f.alnum(40)}.{f.urlsafe(22)}"),
        asana=S("asana_token", f"2/{f.digits(16)}/{f.digits(16)}:{f.hex(32)}"),
    )


def spring_application_yml(f: Fake) -> list[Part]:
    return fill(
        """
        server:
          port: 8080
        spring:
          datasource:
            url: jdbc:postgresql://{%host%}:5432/billing
            username: {%user%}
            password: {%pw%}
        app:
          jwt:
            secret: {%jwt%}
            expiration-ms: 3600000
        """,
        host=f.host(),
        user=f.user(),
        pw=S("password", f.password()),
        jwt=S("jwt_secret", f.b64(48)),
    )


def spring_properties(f: Fake) -> list[Part]:
    return fill(
        """
        spring.mail.host=smtp.sendgrid.net
        spring.mail.username=apikey
        spring.mail.password={%sg%}
        spring.datasource.password={%pw%}
        management.endpoints.web.exposure.include=health,info
        info.app.version={%ver%}
        """,
        sg=S("sendgrid_key", f.sendgrid_key()),
        pw=S("password", f.password()),
        ver=N("semver", f.semver()),
    )


def dotnet_appsettings(f: Fake) -> list[Part]:
    return fill(
        """
        {
          "ConnectionStrings": {
            "Default": "Server={%host%};Database=Shop;User Id={%user%};Password={%pw%};"
          },
          "Jwt": {
            "Key": "{%key%}",
            "Issuer": "https://auth.example.com"
          },
          "Logging": { "LogLevel": { "Default": "Information" } }
        }
        """,
        host=f.host(),
        user=f.user(),
        pw=S("password", f.password()),
        key=S("jwt_secret", f.alnum(48)),
    )


def toml_app_config(f: Fake) -> list[Part]:
    return fill(
        """
        [server]
        bind = "0.0.0.0:8080"

        [database]
        url = "postgresql://{%user%}@{%host%}/events"
        password = "{%pw%}"

        [digitalocean]
        token = "{%do%}"
        spaces_secret = "{%sp%}"
        """,
        user=f.user(),
        host=f.host(),
        pw=S("password", f.password()),
        do=S("digitalocean_token", "dop_v1_" + f.hex(64)),
        sp=S("spaces_secret_key", f.b64(32).rstrip("=")),
    )


def odoo_conf(f: Fake) -> list[Part]:
    return fill(
        """
        [options]
        admin_passwd = {%adm%}
        db_host = {%host%}
        db_user = odoo
        db_password = {%pw%}
        addons_path = {%path%}
        """,
        adm=S("password", f.password()),
        host=f.host(),
        pw=S("password", f.password()),
        path=N("file_path", "/opt/odoo/addons,/mnt/extra-addons"),
    )


def web_config_xml(f: Fake) -> list[Part]:
    return fill(
        """
        <configuration>
          <connectionStrings>
            <add name="Db" connectionString="Server={%host%};User ID=crm;Password={%pw%}" />
          </connectionStrings>
          <appSettings>
            <add key="StripeSecret" value="{%key%}" />
            <add key="BuildNumber" value="{%build%}" />
          </appSettings>
        </configuration>
        """,
        host=f.host(),
        pw=S("password", f.password()),
        key=S("stripe_secret_key", f.stripe_key()),
        build=N("build_number", f"{f.num(2024, 2026)}.{f.num(1, 12)}.{f.num(1, 999)}"),
    )


def npmrc_tokens(f: Fake) -> list[Part]:
    return fill(
        """
        @acme:registry=https://npm.pkg.github.com
        //npm.pkg.github.com/:_authToken={%gh%}
        //registry.npmjs.org/:_authToken={%npm%}
        save-exact=true
        """,
        gh=S("github_token", f.github_token()),
        npm=S("npm_token", "npm_" + f.alnum(36)),
    )


def npmrc_basic_auth(f: Fake) -> list[Part]:
    raw = f"{f.user()}:{f.password()}".encode()
    return fill(
        """
        registry=https://nexus.example.net/repository/npm-group/
        _auth={%auth%}
        always-auth=true
        email={%email%}
        """,
        auth=S("basic_auth", base64.b64encode(raw).decode()),
        email=f.email(),
    )


def pypirc(f: Fake) -> list[Part]:
    return fill(
        """
        [distutils]
        index-servers =
            pypi
            testpypi

        [pypi]
        username = __token__
        password = {%tok%}

        [testpypi]
        repository = {%url%}
        username = __token__
        password = {%ph%}
        """,
        tok=S("pypi_token", "pypi-AgEIcHlwaS5vcmc" + f.urlsafe(140)),
        url=N("url", "https://test.pypi.org/legacy/"),
        ph=N("placeholder", f.pick(("<testpypi-token>", "pypi-XXXXXXXX"))),
    )


def netrc_file(f: Fake) -> list[Part]:
    return fill(
        """
        machine api.heroku.com
          login {%email%}
          password {%her%}
        machine github.com
          login {%user%}
          password {%gh%}
        """,
        email=f.email(),
        her=S("heroku_api_key", "HRKU-AA" + f.urlsafe(58)),
        user=f.first(),
        gh=S("github_token", f.github_token()),
    )


def pip_conf(f: Fake) -> list[Part]:
    return fill(
        """
        [global]
        index-url = https://__token__:{%tok%}@gitlab.com/api/v4/projects/{%pid%}/packages/pypi/simple
        extra-index-url = {%url%}
        timeout = 60
        """,
        tok=S("gitlab_token", f.gitlab_token()),
        pid=f.digits(8),
        url=N("url", "https://pypi.org/simple"),
    )


CONFIG_TEMPLATES: list[tuple[str, Template]] = [
    ("dotenv", dotenv_app),
    ("dotenv", dotenv_example),
    ("dotenv", dotenv_ai_keys),
    ("dotenv", dotenv_quoted_exports),
    ("dotenv", dotenv_laravel),
    ("dotenv", dotenv_nextauth),
    ("dotenv", dotenv_misc_saas),
    ("yaml", spring_application_yml),
    ("properties", spring_properties),
    ("json", dotnet_appsettings),
    ("toml", toml_app_config),
    ("ini", odoo_conf),
    ("xml", web_config_xml),
    ("npmrc", npmrc_tokens),
    ("npmrc", npmrc_basic_auth),
    ("pypirc", pypirc),
    ("netrc", netrc_file),
    ("pip_conf", pip_conf),
]
