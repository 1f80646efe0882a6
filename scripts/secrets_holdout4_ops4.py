"""holdout4 templates: chat-style prose, private keys and certificates pasted into a chat."""

from __future__ import annotations

from secrets_holdout4 import Fake, N, Part, S, Template, fill


def chat_openai_401(f: Fake) -> list[Part]:
    return fill(
        """
        hey, my script keeps getting 401 from openai. I set the key like this:

            OPENAI_API_KEY={%key%}

        and the org id is {%org%}. request id from the error was {%rid%}. what's wrong?
        """,
        key=S("openai_key", f.openai_key()),
        org=N("openai_org_id", "org-" + f.alnum(24)),
        rid=N("request_id", "req_" + f.hex(32)),
    )


def chat_db_passwords(f: Fake) -> list[Part]:
    return fill(
        """
        Can you write a bash script that dumps both databases? prod password is {%p1%} and
        staging is {%p2%} (user is {%user%} on both). Host for prod: {%host%}
        """,
        p1=S("password", f.password()),
        p2=S("password", f.password()),
        user=f.user(),
        host=f.host(),
    )


def chat_wifi(f: Fake) -> list[Part]:
    return fill(
        """
        the raspberry pi won't join the office wifi. SSID is {%w%}-Guest, password: {%pw%}
        here's my wpa_supplicant.conf:

        network={
            ssid="{%w%}-Guest"
            psk="{%pw2%}"
        }
        """,
        w=f.word().capitalize(),
        pw=S("wifi_password", f.passphrase()),
        pw2=S("wifi_password", f.passphrase()),
    )


def chat_slack_webhook(f: Fake) -> list[Part]:
    return fill(
        """
        I'm posting alerts to {%hook%} from a cron job but nothing shows up in #ops-{%w%}.
        The response body is just "invalid_payload". Payload:
        {"text": "disk usage 91% on db-3"}
        """,
        hook=S("slack_webhook", f.slack_webhook()),
        w=f.word(),
    )


def chat_totp_uri(f: Fake) -> list[Part]:
    return fill(
        """
        I decoded the 2FA QR code and got
        otpauth://totp/Acme:{%email%}?secret={%seed%}&issuer=Acme&period=30
        how do I generate the codes in node? the base32 seed alone is {%seed2%}
        """,
        email=f.email(),
        seed=S("totp_seed", f.totp_seed()),
        seed2=S("totp_seed", f.totp_seed()),
    )


def chat_ssh_private_key(f: Fake) -> list[Part]:
    return fill(
        """
        ssh says "Load key: invalid format" for this deploy key, can you see why?

        {%key%}

        the public half on the server is:
        {%pub%}
        """,
        key=S("openssh_private_key", f.openssh_private()),
        pub=N("ssh_public_key", f.ed25519_pub()),
    )


def chat_pgp_key(f: Fake) -> list[Part]:
    return fill(
        """
        gpg --import fails with "no valid OpenPGP data found". Key fingerprint should be
        {%fp%}. The export:

        {%key%}
        """,
        fp=N("gpg_fingerprint", f.hex(40).upper()),
        key=S("pgp_private_key", f.pgp_private()),
    )


def chat_tls_cert_and_key(f: Fake) -> list[Part]:
    return fill(
        """
        nginx: SSL_CTX_use_PrivateKey failed (key values mismatch). cert.pem:
        {%cert%}
        and key.pem:
        {%key%}
        """,
        cert=N("certificate_pem", f.cert_pem()),
        key=S("private_key", f.pick((f.rsa_private(), f.pkcs8_private()))),
    )


def chat_ec_key_jwt(f: Fake) -> list[Part]:
    return fill(
        """
        Signing ES256 JWTs for Apple Sign In. team id {%team%}, key id {%kid%}. Key file:
        {%key%}
        public key for verification:
        {%pub%}
        """,
        team=N("apple_team_id", f.upper(10)),
        kid=N("key_id", f.upper(10)),
        key=S("ec_private_key", f.ec_private()),
        pub=N("public_key_pem", f.public_pem()),
    )


def chat_encrypted_key(f: Fake) -> list[Part]:
    return fill(
        """
        openssl asks for a pass phrase for this key; I set it to "{%pp%}" but it says
        bad decrypt:
        {%key%}
        """,
        pp=S("passphrase", f.passphrase()),
        key=S("encrypted_private_key", f.encrypted_private()),
    )


def chat_keys_migration(f: Fake) -> list[Part]:
    return fill(
        """
        We're moving email providers. Old SendGrid key: {%sg%}
        New Postmark server token: {%pm%}
        Template ids stay the same ({%t1%}, {%t2%}). Can you update mailer.ts?
        """,
        sg=S("sendgrid_key", f.sendgrid_key()),
        pm=S("postmark_server_token", f.uuid()),
        t1=N("template_id", "d-" + f.hex(32)),
        t2=N("template_id", "d-" + f.hex(32)),
    )


def chat_fcm_legacy(f: Fake) -> list[Part]:
    return fill(
        """
        push notifications stopped working, we still use the legacy FCM server key
        {%key%} with sender id {%sid%}. Do I need to migrate to HTTP v1?
        """,
        key=S("fcm_server_key", f.fcm_server_key()),
        sid=N("fcm_sender_id", f.digits(12)),
    )


def chat_lookalike_ids(f: Fake) -> list[Part]:
    return fill(
        """
        The deploy of {%sha%} broke checkout. Failing request: trace {%tid%},
        order {%oid%}, image {%digest%}. Rolled back to build {%build%} ({%ver%}).
        Dashboard: {%url%}
        """,
        sha=N("git_sha", f.git_sha()),
        tid=N("trace_id", f.trace_id()),
        oid=N("uuid", f.uuid()),
        digest=N("docker_digest", f.docker_digest()),
        build=N("build_number", str(f.num(1000, 99999))),
        ver=N("semver", f.semver()),
        url=N("url", f"https://grafana.example.com/d/{f.alnum(9)}/checkout?orgId=1"),
    )


def chat_cursor_pagination(f: Fake) -> list[Part]:
    return fill(
        """
        The API returns next_cursor={%cur%} but passing it back gives me the same page.
        Response etag {%etag%}, content md5 {%md5%}.
        """,
        cur=N("base64_data", f.harmless_b64()),
        etag=N("etag", f.hex(32)),
        md5=N("md5", f.md5()),
    )


def chat_env_names_only(f: Fake) -> list[Part]:
    return fill(
        """
        Which of these do I actually need in prod? {%a%}, {%b%}, {%c%}.
        Right now they're all set to "{%ph%}" in the template repo.
        """,
        a=N("env_var_name", "STRIPE_WEBHOOK_SECRET"),
        b=N("env_var_name", "AWS_SECRET_ACCESS_KEY"),
        c=N("env_var_name", "GITHUB_APP_PRIVATE_KEY"),
        ph=N("placeholder", f.pick(("REPLACE_ME", "<set me>", "TODO"))),
    )


def chat_basic_auth_url(f: Fake) -> list[Part]:
    return fill(
        """
        pip can't reach our index:

            pip install -i https://{%user%}:{%pw%}@pypi.example.net/simple acme-sdk

        gives 401, but the same creds work in the browser
        """,
        user=f.user(),
        pw=S("password", f.password()),
    )


def chat_bitbucket_app_password(f: Fake) -> list[Part]:
    return fill(
        """
        Bitbucket pipelines push fails. Username {%user%}, app password {%pw%}, remote is
        https://bitbucket.org/{%w%}/api.git - is the app password scope wrong?
        """,
        user=f.first(),
        pw=S("bitbucket_app_password", "ATBB" + f.alnum(32)),
        w=f.word(),
    )


def chat_ldap_bind(f: Fake) -> list[Part]:
    return fill(
        """
        ldapsearch -x -H ldaps://dc1.corp.example.com -D "CN=svc-{%w%},OU=Service,DC=corp" \\
          -w '{%pw%}' -b "DC=corp" "(sAMAccountName={%user%})"
        returns "Invalid credentials (49)". The bind account was created yesterday.
        """,
        w=f.word(),
        pw=S("password", f.password()),
        user=f.first(),
    )


def chat_github_app_key(f: Fake) -> list[Part]:
    return fill(
        """
        GitHub App auth: app id {%app%}, installation {%inst%}. I generate the JWT from
        this private key but get "A JSON web token could not be decoded":
        {%key%}
        """,
        app=N("github_app_id", f.digits(6)),
        inst=N("github_installation_id", f.digits(8)),
        key=S("rsa_private_key", f.rsa_private()),
    )


def chat_wandb_kaggle(f: Fake) -> list[Part]:
    return fill(
        """
        on the cluster I ran `wandb login {%wb%}` and put this in ~/.kaggle/kaggle.json:
        {"username":"{%user%}","key":"{%kg%}"}
        still "401 Unauthorized" from kaggle
        """,
        wb=S("wandb_key", f.hex(40)),
        user=f.first(),
        kg=S("kaggle_key", f.hex(32)),
    )


def chat_links_lookalike(f: Fake) -> list[Part]:
    return fill(
        """
        Context links for the bug:
        - failing run: {%run%}
        - design: {%fig%}
        - walkthrough video: {%yt%}
        - upstream issue: {%gh%}
        """,
        run=N("url", f"https://github.com/acme/web/actions/runs/{f.digits(11)}/job/{f.digits(11)}"),
        fig=N(
            "url", f"https://www.figma.com/design/{f.alnum(22)}/Checkout?node-id=12-{f.num(1, 999)}"
        ),
        yt=N("url", f"https://www.youtube.com/watch?v={f.urlsafe(11)}"),
        gh=N("url", f"https://github.com/{f.word()}/{f.word()}/issues/{f.num(100, 9999)}"),
    )


OPS4_TEMPLATES: list[tuple[str, Template]] = [
    ("chat", chat_openai_401),
    ("chat", chat_db_passwords),
    ("chat", chat_wifi),
    ("chat", chat_slack_webhook),
    ("chat", chat_totp_uri),
    ("chat", chat_ssh_private_key),
    ("chat", chat_pgp_key),
    ("chat", chat_tls_cert_and_key),
    ("chat", chat_ec_key_jwt),
    ("chat", chat_encrypted_key),
    ("chat", chat_keys_migration),
    ("chat", chat_fcm_legacy),
    ("chat", chat_lookalike_ids),
    ("chat", chat_cursor_pagination),
    ("chat", chat_env_names_only),
    ("chat", chat_basic_auth_url),
    ("chat", chat_bitbucket_app_password),
    ("chat", chat_ldap_bind),
    ("chat", chat_github_app_key),
    ("chat", chat_wandb_kaggle),
    ("chat", chat_links_lookalike),
]
