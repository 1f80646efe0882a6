"""holdout4 templates: Python source snippets."""

from __future__ import annotations

from secrets_holdout4 import Fake, N, Part, S, Template, fill


def py_openai_client(f: Fake) -> list[Part]:
    return fill(
        """
        # requirements: openai=={%ver%}
        from openai import OpenAI

        client = OpenAI(api_key="{%key%}")
        resp = client.chat.completions.create(model="gpt-4o-mini", messages=history)
        print(resp.choices[0].message.content)
        """,
        ver=N("semver", f.semver()),
        key=S("openai_key", f.openai_key()),
    )


def py_anthropic_setdefault(f: Fake) -> list[Part]:
    return fill(
        """
        import os
        import anthropic

        os.environ.setdefault("{%name%}", "{%key%}")
        client = anthropic.Anthropic()
        msg = client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, messages=m)
        """,
        name=N("env_var_name", "ANTHROPIC_API_KEY"),
        key=S("anthropic_key", f.anthropic_key()),
    )


def py_boto3_static(f: Fake) -> list[Part]:
    return fill(
        """
        s3 = boto3.client(
            "s3",
            aws_access_key_id="{%kid%}",
            aws_secret_access_key="{%sec%}",
            region_name="{%region%}",
        )
        s3.download_file("acme-{%bucket%}-exports", "reports/{%obj%}.parquet", "/tmp/r.parquet")
        """,
        kid=S("aws_access_key_id", f.aws_key_id()),
        sec=S("aws_secret_key", f.aws_secret()),
        region=f.region(),
        bucket=f.word(),
        obj=N("uuid", f.uuid()),
    )


def py_django_settings(f: Fake) -> list[Part]:
    return fill(
        """
        # settings/production.py
        SECRET_KEY = '{%key%}'
        DEBUG = False
        STATIC_ROOT = "{%path%}"
        DATABASES = {
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "{%db%}",
                "USER": "{%user%}",
                "PASSWORD": "{%pw%}",
                "HOST": "{%host%}",
                "PORT": "5432",
            }
        }
        """,
        key=S("django_secret_key", f.django_key()),
        path=N("file_path", f"/srv/{f.word()}/staticfiles"),
        db=f.word(),
        user=f.user(),
        pw=S("password", f.password()),
        host=f.host(),
    )


def py_flask_config(f: Fake) -> list[Part]:
    return fill(
        """
        class ProdConfig(Config):
            SECRET_KEY = "{%key%}"
            SQLALCHEMY_DATABASE_URI = "postgresql+psycopg2://{%user%}:{%pw%}@{%host%}/app"
            SESSION_COOKIE_SECURE = True
        """,
        key=S("flask_secret_key", f.hex(48)),
        user=f.user(),
        pw=S("password", f.password()),
        host=f.host(),
    )


def py_gitlab_api(f: Fake) -> list[Part]:
    return fill(
        """
        GITLAB_TOKEN = "{%tok%}"
        PROJECT = {%pid%}

        r = requests.post(
            f"https://gitlab.com/api/v4/projects/{PROJECT}/pipeline",
            headers={"PRIVATE-TOKEN": GITLAB_TOKEN},
            json={"ref": "{%sha%}"},
            timeout=30,
        )
        """,
        tok=S("gitlab_token", f.gitlab_token()),
        pid=f.digits(8),
        sha=N("git_sha", f.git_sha()),
    )


def py_stripe_webhook(f: Fake) -> list[Part]:
    return fill(
        """
        stripe.api_key = "{%key%}"
        endpoint_secret = "{%whsec%}"

        event = stripe.Webhook.construct_event(payload, sig_header, endpoint_secret)
        if event["type"] == "invoice.paid":
            cust = stripe.Customer.retrieve("{%cus%}")
        """,
        key=S("stripe_secret_key", f.stripe_key()),
        whsec=S("stripe_webhook_secret", "whsec_" + f.alnum(32)),
        cus=N("stripe_object_id", "cus_" + f.alnum(14)),
    )


def py_slack_sdk(f: Fake) -> list[Part]:
    return fill(
        """
        from slack_sdk import WebClient

        client = WebClient(token="{%tok%}")
        client.chat_postMessage(channel="{%chan%}", text=f"deploy {sha} finished")
        """,
        tok=S("slack_bot_token", f.slack_bot()),
        chan=N("slack_channel_id", "C0" + f.upper(9)),
    )


def py_hf_hub(f: Fake) -> list[Part]:
    return fill(
        """
        from huggingface_hub import login, snapshot_download

        login(token="{%tok%}")
        path = snapshot_download("{%org%}/{%model%}-7b", revision="{%sha%}")
        """,
        tok=S("huggingface_token", "hf_" + f.alnum(34)),
        org=f.word(),
        model=f.word(),
        sha=N("git_sha", f.git_sha()),
    )


def py_pyjwt(f: Fake) -> list[Part]:
    return fill(
        """
        JWT_SECRET = "{%sec%}"

        def make_token(user_id: str) -> str:
            payload = {"sub": user_id, "exp": datetime.utcnow() + timedelta(hours=1)}
            return jwt.encode(payload, JWT_SECRET, algorithm="HS256")

        # decoded in prod: {%tok%}
        """,
        sec=S("jwt_secret", f.pick((f.passphrase(), f.b64url(32)))),
        tok=S("jwt", f.jwt()),
    )


def py_fernet(f: Fake) -> list[Part]:
    return fill(
        """
        from cryptography.fernet import Fernet

        FERNET_KEY = b"{%key%}"
        cipher = Fernet(FERNET_KEY)
        blob = cipher.encrypt(json.dumps(record).encode())
        """,
        key=S("encryption_key", f.b64url(32) + "="),
    )


def py_test_fixture_placeholders(f: Fake) -> list[Part]:
    return fill(
        """
        @pytest.fixture(autouse=True)
        def fake_env(monkeypatch):
            monkeypatch.setenv("OPENAI_API_KEY", "{%ph%}")
            monkeypatch.setenv("REQUEST_ID", "{%rid%}")
            monkeypatch.setenv("BUILD_SHA", "{%sha%}")
        """,
        ph=N("placeholder", f.pick(("test-key-not-real", "dummy", "sk-test-xxxxxxxx"))),
        rid=N("uuid", f.uuid()),
        sha=N("git_sha", f.git_sha()),
    )


def py_redis_client(f: Fake) -> list[Part]:
    return fill(
        """
        r = redis.Redis(
            host="{%host%}",
            port=6380,
            password="{%pw%}",
            ssl=True,
        )
        """,
        host=f.host(),
        pw=S("password", f.password()),
    )


def py_psycopg_dsn(f: Fake) -> list[Part]:
    return fill(
        """
        conn = psycopg.connect(
            "host={%host%} dbname=analytics user={%user%} password={%pw%} sslmode=require"
        )
        """,
        host=f.host(),
        user=f.user(),
        pw=S("password", f.password()),
    )


def py_sendgrid(f: Fake) -> list[Part]:
    return fill(
        """
        sg = SendGridAPIClient("{%key%}")
        message = Mail(from_email="noreply@example.com", to_emails=to)
        message.template_id = "{%tpl%}"
        sg.send(message)
        """,
        key=S("sendgrid_key", f.sendgrid_key()),
        tpl=N("template_id", "d-" + f.hex(32)),
    )


def py_twilio(f: Fake) -> list[Part]:
    return fill(
        """
        account_sid = "AC{%sid%}"
        auth_token = "{%tok%}"
        client = Client(account_sid, auth_token)
        msg = client.messages.create(body="Your code is 4821", from_="+15005550006", to=to)
        # last run returned {%msid%}
        """,
        sid=f.hex(32),
        tok=S("twilio_auth_token", f.hex(32)),
        msid=N("twilio_message_sid", "SM" + f.hex(32)),
    )


def py_smtp_app_password(f: Fake) -> list[Part]:
    app_pw = " ".join(f.chars("abcdefghijklmnopqrstuvwxyz", 4) for _ in range(4))
    return fill(
        """
        with smtplib.SMTP_SSL("smtp.gmail.com", 465) as server:
            server.login("{%email%}", "{%pw%}")
            server.sendmail(sender, rcpt, msg.as_string())
        """,
        email=f.email(),
        pw=S("smtp_password", app_pw),
    )


def py_pyotp(f: Fake) -> list[Part]:
    return fill(
        """
        import pyotp

        totp = pyotp.TOTP("{%seed%}")
        print("current code:", totp.now())
        """,
        seed=S("totp_seed", f.totp_seed()),
    )


def py_gemini(f: Fake) -> list[Part]:
    return fill(
        """
        import google.generativeai as genai

        genai.configure(api_key='{%key%}')
        model = genai.GenerativeModel("gemini-1.5-flash")
        """,
        key=S("google_api_key", f.google_key()),
    )


def py_mongo_srv(f: Fake) -> list[Part]:
    return fill(
        """
        client = MongoClient(
            "mongodb+srv://{%user%}:{%pw%}@cluster0.{%cl%}.mongodb.net/?retryWrites=true&w=majority"
        )
        """,
        user=f.user(),
        pw=S("password", f.password()),
        cl=f.lower(5),
    )


def py_langchain_env(f: Fake) -> list[Part]:
    return fill(
        """
        os.environ["LANGCHAIN_TRACING_V2"] = "true"
        os.environ["LANGCHAIN_API_KEY"] = "{%ls%}"
        os.environ["PINECONE_API_KEY"] = "{%pc%}"
        index = pc.Index("docs-{%idx%}")
        """,
        ls=S("langsmith_key", f"lsv2_pt_{f.hex(32)}_{f.hex(10)}"),
        pc=S("pinecone_key", f"pcsk_{f.alnum(5)}_{f.alnum(63)}"),
        idx=f.word(),
    )


def py_checksums_only(f: Fake) -> list[Part]:
    return fill(
        """
        PASSWORD_MIN_LENGTH = 12
        EXPECTED_SHA256 = "{%sha%}"
        LEGACY_MD5 = "{%md5%}"

        def verify(path: Path) -> bool:
            return hashlib.sha256(path.read_bytes()).hexdigest() == EXPECTED_SHA256
        """,
        sha=N("sha256", f.sha256()),
        md5=N("md5", f.md5()),
    )


def py_telegram_bot(f: Fake) -> list[Part]:
    return fill(
        """
        app = ApplicationBuilder().token("{%tok%}").build()
        app.add_handler(CommandHandler("start", start))
        app.run_polling()
        """,
        tok=S("telegram_bot_token", f"{f.digits(10)}:AA{f.urlsafe(33)}"),
    )


def py_tweepy(f: Fake) -> list[Part]:
    return fill(
        """
        client = tweepy.Client(bearer_token="{%tok%}")
        tweets = client.search_recent_tweets(query="from:{%user%}", max_results=10)
        """,
        tok=S("twitter_bearer_token", "A" * 22 + f.alnum(26) + "%3D" + f.alnum(50)),
        user=f.word(),
    )


def py_airtable_dropbox(f: Fake) -> list[Part]:
    return fill(
        """
        api = Api("{%at%}")
        table = api.table("app{%base%}", "tbl{%tbl%}")
        dbx = dropbox.Dropbox("{%dbx%}")
        """,
        at=S("airtable_pat", f"pat{f.alnum(14)}.{f.hex(64)}"),
        base=f.alnum(14),
        tbl=f.alnum(14),
        dbx=S("dropbox_token", "sl.B" + f.urlsafe(136)),
    )


CODE_TEMPLATES: list[tuple[str, Template]] = [
    ("python", py_openai_client),
    ("python", py_anthropic_setdefault),
    ("python", py_boto3_static),
    ("python", py_django_settings),
    ("python", py_flask_config),
    ("python", py_gitlab_api),
    ("python", py_stripe_webhook),
    ("python", py_slack_sdk),
    ("python", py_hf_hub),
    ("python", py_pyjwt),
    ("python", py_fernet),
    ("python", py_test_fixture_placeholders),
    ("python", py_redis_client),
    ("python", py_psycopg_dsn),
    ("python", py_sendgrid),
    ("python", py_twilio),
    ("python", py_smtp_app_password),
    ("python", py_pyotp),
    ("python", py_gemini),
    ("python", py_mongo_srv),
    ("python", py_langchain_env),
    ("python", py_checksums_only),
    ("python", py_telegram_bot),
    ("python", py_tweepy),
    ("python", py_airtable_dropbox),
]
