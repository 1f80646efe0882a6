"""holdout4 templates: Ruby, PHP, Elixir, Dart, shell, PowerShell, SQL and Jupyter."""

from __future__ import annotations

import json

from secrets_holdout4 import ALNUM, Fake, N, Part, S, Template, fill


def rb_rails_credentials(f: Fake) -> list[Part]:
    return fill(
        """
        $ bin/rails credentials:show
        secret_key_base: {%skb%}
        aws:
          access_key_id: {%kid%}
          secret_access_key: {%sec%}
        """,
        skb=S("rails_secret_key_base", f.hex(128)),
        kid=S("aws_access_key_id", f.aws_key_id()),
        sec=S("aws_secret_key", f.aws_secret()),
    )


def rb_octokit(f: Fake) -> list[Part]:
    return fill(
        """
        client = Octokit::Client.new(access_token: '{%tok%}')
        client.create_deployment('acme/storefront', '{%sha%}', environment: 'production')
        """,
        tok=S("github_token", f.github_token("gho_")),
        sha=N("git_sha", f.git_sha()),
    )


def rb_sidekiq_redis(f: Fake) -> list[Part]:
    return fill(
        """
        Sidekiq.configure_server do |config|
          config.redis = { url: "rediss://:{%pw%}@{%host%}:6380/0" }
        end
        """,
        pw=S("password", f.password()),
        host=f.host(),
    )


def rb_shopify(f: Fake) -> list[Part]:
    return fill(
        """
        ShopifyAPI::Context.setup(
          api_key: "{%key%}",
          api_secret_key: "{%sec%}",
          host: "https://{%w%}-app.example.com",
          api_version: "2024-10",
          is_private: true,
        )
        session = ShopifyAPI::Auth::Session.new(
          shop: "{%w%}.myshopify.com",
          access_token: "{%tok%}",
        )
        """,
        key=f.hex(32),
        sec=S("shopify_shared_secret", "shpss_" + f.hex(32)),
        w=f.word(),
        tok=S("shopify_token", "shpat_" + f.hex(32)),
    )


def rb_jwt_encode(f: Fake) -> list[Part]:
    return fill(
        """
        HMAC_SECRET = '{%sec%}'
        token = JWT.encode({ user_id: user.id, exp: 24.hours.from_now.to_i }, HMAC_SECRET, 'HS256')
        """,
        sec=S("jwt_secret", f.hex(64)),
    )


def php_phpmailer(f: Fake) -> list[Part]:
    return fill(
        """
        $mail->isSMTP();
        $mail->Host       = 'smtp.office365.com';
        $mail->SMTPAuth   = true;
        $mail->Username   = '{%email%}';
        $mail->Password   = '{%pw%}';
        $mail->Port       = 587;
        """,
        email=f.email(),
        pw=S("smtp_password", f.password()),
    )


def php_stripe_square(f: Fake) -> list[Part]:
    return fill(
        """
        \\Stripe\\Stripe::setApiKey('{%stripe%}');
        $square = new SquareClient([
            'accessToken' => '{%sq%}',
            'environment' => Environment::PRODUCTION,
        ]);
        """,
        stripe=S("stripe_secret_key", f.stripe_key()),
        sq=S("square_token", "EAAA" + f.urlsafe(60)),
    )


def php_pdo(f: Fake) -> list[Part]:
    return fill(
        """
        $pdo = new PDO('mysql:host={%host%};dbname=shop;charset=utf8mb4', 'root', '{%pw%}');
        """,
        host=f.host(),
        pw=S("password", f.password()),
    )


def php_wp_config(f: Fake) -> list[Part]:
    salt = ALNUM + "!#%^&*()-_=+[]{}|;:,.<>/?~"
    return fill(
        """
        define( 'DB_NAME', 'wordpress' );
        define( 'DB_USER', 'wp_{%w%}' );
        define( 'DB_PASSWORD', '{%pw%}' );
        define( 'DB_HOST', 'localhost' );
        define( 'AUTH_KEY',         '{%k1%}' );
        define( 'SECURE_AUTH_KEY',  '{%k2%}' );
        """,
        w=f.word(),
        pw=S("password", f.password()),
        k1=S("wordpress_salt", f.chars(salt, 64)),
        k2=S("wordpress_salt", f.chars(salt, 64)),
    )


def php_facebook_mailchimp(f: Fake) -> list[Part]:
    dc = str(f.num(1, 21))
    return fill(
        """
        $fb = new \\Facebook\\Facebook(['app_id' => '{%app%}', 'default_graph_version' => 'v19.0']);
        $fb->setDefaultAccessToken('{%fb%}');
        $mc = new \\MailchimpMarketing\\ApiClient();
        $mc->setConfig(['apiKey' => '{%mc%}', 'server' => 'us{%dc%}']);
        """,
        app=f.digits(15),
        fb=S("facebook_access_token", "EAAG" + f.alnum(180)),
        mc=S("mailchimp_key", f"{f.hex(32)}-us{dc}"),
        dc=dc,
    )


def elixir_runtime_config(f: Fake) -> list[Part]:
    return fill(
        """
        config :my_app, MyApp.Repo,
          username: "{%user%}",
          password: "{%pw%}",
          hostname: "{%host%}",
          pool_size: 10

        config :my_app, MyAppWeb.Endpoint,
          secret_key_base: "{%skb%}"
        """,
        user=f.user(),
        pw=S("password", f.password()),
        host=f.host(),
        skb=S("phoenix_secret_key_base", f.b64(48)),
    )


def dart_flutter_keys(f: Fake) -> list[Part]:
    return fill(
        """
        class Env {
          static const openAiKey = '{%key%}';
          static const primary = Color(0xFF{%col%});
          static const appVersion = '{%ver%}';
        }
        """,
        key=S("openai_key", f.openai_key()),
        col=N("color_hex", f.hex(6).upper()),
        ver=N("semver", f.semver()),
    )


def sh_export_aws(f: Fake) -> list[Part]:
    return fill(
        """
        $ export AWS_ACCESS_KEY_ID={%kid%}
        $ export AWS_SECRET_ACCESS_KEY={%sec%}
        $ export AWS_DEFAULT_REGION={%region%}
        $ aws s3 ls s3://acme-{%w%}-logs/
        An error occurred (AccessDenied) when calling the ListObjectsV2 operation: Access Denied
        """,
        kid=S("aws_access_key_id", f.aws_key_id()),
        sec=S("aws_secret_key", f.aws_secret()),
        region=f.region(),
        w=f.word(),
    )


def sh_mysql_cli(f: Fake) -> list[Part]:
    return fill(
        """
        mysql -h {%host%} -u root -p'{%pw%}' shop < dump-{%date%}.sql
        """,
        host=f.host(),
        pw=S("password", f.password()),
        date=N("date", f"2026{f.num(1, 12):02d}{f.num(1, 28):02d}"),
    )


def sh_pg_dump(f: Fake) -> list[Part]:
    return fill(
        """
        PGPASSWORD={%pw%} pg_dump -h {%host%} -U {%user%} -Fc orders > /backups/orders.dump
        """,
        pw=S("password", f.password()),
        host=f.host(),
        user=f.user(),
    )


def sh_openssl_enc(f: Fake) -> list[Part]:
    return fill(
        """
        openssl enc -aes-256-cbc -K {%key%} -iv {%iv%} -in backup.tar -out backup.tar.enc
        """,
        key=S("encryption_key", f.hex(64)),
        iv=f.hex(32),
    )


def sh_age_keygen(f: Fake) -> list[Part]:
    return fill(
        """
        $ age-keygen -o key.txt
        Public key: {%pub%}
        $ cat key.txt
        # created: {%ts%}
        # public key: {%pub2%}
        {%sec%}
        """,
        pub=N("age_public_key", "age1" + f.chars("qpzry9x8gf2tvdw0s3jn54khce6mua7l", 58)),
        ts=N("timestamp", f.timestamp()),
        pub2=N("age_public_key", "age1" + f.chars("qpzry9x8gf2tvdw0s3jn54khce6mua7l", 58)),
        sec=S("age_secret_key", f.age_secret()),
    )


def sh_ssh_keygen_output(f: Fake) -> list[Part]:
    return fill(
        """
        $ ssh-keygen -t ed25519 -C "ci@{%w%}"
        Your identification has been saved in /home/ci/.ssh/id_ed25519
        Your public key has been saved in /home/ci/.ssh/id_ed25519.pub
        The key fingerprint is:
        {%fp%} ci@{%w%}
        $ cat ~/.ssh/id_ed25519.pub
        {%pub%}
        """,
        w=f.word(),
        fp=N("ssh_fingerprint", f.ssh_fingerprint()),
        pub=N("ssh_public_key", f.ed25519_pub()),
    )


def ps_secure_string(f: Fake) -> list[Part]:
    return fill(
        """
        $secpass = ConvertTo-SecureString "{%pw%}" -AsPlainText -Force
        $cred = New-Object System.Management.Automation.PSCredential ("CORP\\svc_{%w%}", $secpass)
        Invoke-Command -ComputerName {%w%}-app01 -Credential $cred -ScriptBlock { Get-Service }
        """,
        pw=S("password", f.password()),
        w=f.word(),
    )


def ps_env_github(f: Fake) -> list[Part]:
    return fill(
        """
        PS C:\\src\\infra> $env:GITHUB_TOKEN = "{%tok%}"
        PS C:\\src\\infra> gh release create v{%ver%} --notes "hotfix"
        """,
        tok=S("github_token", f.github_fine_pat()),
        ver=N("semver", f.semver()),
    )


def sql_create_user(f: Fake) -> list[Part]:
    return fill(
        """
        CREATE USER {%user%} WITH PASSWORD '{%pw%}';
        GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA public TO {%user%};
        """,
        user=f.user(),
        pw=S("password", f.password()),
    )


def sql_alter_login(f: Fake) -> list[Part]:
    return fill(
        """
        ALTER LOGIN sa WITH PASSWORD = N'{%pw%}';
        GO
        """,
        pw=S("password", f.password()),
    )


def sql_lookalike_query(f: Fake) -> list[Part]:
    return fill(
        """
        SELECT id, status, password_hash_algo
        FROM deployments
        WHERE commit_sha = '{%sha%}'
          AND tenant_id = '{%tenant%}'
          AND created_at > '{%ts%}';
        """,
        sha=N("git_sha", f.git_sha()),
        tenant=N("uuid", f.uuid()),
        ts=N("timestamp", f.timestamp()),
    )


def sql_insert_integration(f: Fake) -> list[Part]:
    return fill(
        """
        INSERT INTO integrations (id, provider, api_key, created_at)
        VALUES ('{%id%}', 'sendgrid', '{%key%}', now()),
               ('{%id2%}', 'postmark', '{%pm%}', now());
        """,
        id=N("uuid", f.uuid()),
        key=S("sendgrid_key", f.sendgrid_key()),
        id2=N("uuid", f.uuid()),
        pm=S("postmark_server_token", f.uuid()),
    )


def jupyter_cell_json(f: Fake) -> list[Part]:
    cell_id = f.hex(8)
    return fill(
        """
        {
         "cell_type": "code",
         "execution_count": {%n%},
         "id": "{%cid%}",
         "metadata": {},
         "outputs": [],
         "source": [
          "import os\\n",
          "os.environ[\\"OPENAI_API_KEY\\"] = \\"{%key%}\\"\\n",
          "os.environ[\\"WANDB_API_KEY\\"] = \\"{%wb%}\\"\\n"
         ]
        }
        """,
        n=str(f.num(1, 40)),
        cid=N("notebook_cell_id", cell_id),
        key=S("openai_key", f.openai_key()),
        wb=S("wandb_key", f.hex(40)),
    )


def jupyter_output_headers(f: Fake) -> list[Part]:
    headers = {"Content-Type": "application/json", "x-api-key": "@@"}
    dumped = json.dumps(headers).split("@@")
    return [
        "In [12]: print(session.headers)\n",
        dumped[0],
        S("cohere_key", f.alnum(40)),
        dumped[1],
        "\nIn [13]: resp.headers['x-request-id']\nOut[13]: '",
        N("request_id", f.hex(32)),
        "'\n",
    ]


def sh_postman_figma(f: Fake) -> list[Part]:
    return fill(
        r"""
        curl -s https://api.getpostman.com/collections \
          -H "X-Api-Key: {%pm%}" | jq '.collections[].uid'
        curl -s -H "X-Figma-Token: {%fig%}" \
          "https://api.figma.com/v1/files/{%file%}?depth=1"
        """,
        pm=S("postman_api_key", f"PMAK-{f.hex(24)}-{f.hex(34)}"),
        fig=S("figma_token", "figd_" + f.urlsafe(40)),
        file=N("figma_file_key", f.alnum(22)),
    )


CODE3_TEMPLATES: list[tuple[str, Template]] = [
    ("ruby", rb_rails_credentials),
    ("ruby", rb_octokit),
    ("ruby", rb_sidekiq_redis),
    ("ruby", rb_shopify),
    ("ruby", rb_jwt_encode),
    ("php", php_phpmailer),
    ("php", php_stripe_square),
    ("php", php_pdo),
    ("php", php_wp_config),
    ("php", php_facebook_mailchimp),
    ("elixir", elixir_runtime_config),
    ("dart", dart_flutter_keys),
    ("shell", sh_export_aws),
    ("shell", sh_mysql_cli),
    ("shell", sh_pg_dump),
    ("shell", sh_openssl_enc),
    ("shell", sh_age_keygen),
    ("shell", sh_ssh_keygen_output),
    ("powershell", ps_secure_string),
    ("powershell", ps_env_github),
    ("sql", sql_create_user),
    ("sql", sql_alter_login),
    ("sql", sql_lookalike_query),
    ("sql", sql_insert_integration),
    ("jupyter", jupyter_cell_json),
    ("jupyter", jupyter_output_headers),
    ("shell", sh_postman_figma),
]
