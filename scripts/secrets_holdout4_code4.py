"""holdout4 templates: JavaScript and TypeScript source snippets."""

from __future__ import annotations

from secrets_holdout4 import Fake, N, Part, S, Template, fill


def js_express_session(f: Fake) -> list[Part]:
    return fill(
        """
        app.use(
          session({
            secret: '{%sec%}',
            resave: false,
            cookie: { secure: true, maxAge: 86400000 },
          })
        );
        """,
        sec=S("session_secret", f.pick((f.passphrase(), f.hex(64)))),
    )


def js_octokit(f: Fake) -> list[Part]:
    return fill(
        """
        const octokit = new Octokit({ auth: "{%tok%}" });
        await octokit.rest.repos.createCommitStatus({
          owner: "acme", repo: "web", sha: "{%sha%}", state: "success",
        });
        """,
        tok=S("github_token", f.github_token()),
        sha=N("git_sha", f.git_sha()),
    )


def js_firebase_config(f: Fake) -> list[Part]:
    proj = f"{f.word()}-{f.word()}-{f.lower(5)}"
    num = f.digits(12)
    return fill(
        """
        const firebaseConfig = {
          apiKey: "{%key%}",
          authDomain: "{%proj%}.firebaseapp.com",
          projectId: "{%proj%}",
          messagingSenderId: "{%num%}",
          appId: "1:{%num%}:web:{%app%}",
        };
        """,
        key=S("google_api_key", f.google_key()),
        proj=proj,
        num=num,
        app=f.hex(22),
    )


def ts_supabase_admin(f: Fake) -> list[Part]:
    claims = {"iss": "supabase", "ref": f.lower(20), "role": "service_role", "iat": f.epoch()}
    return fill(
        """
        // server-only admin client
        export const supabaseAdmin = createClient(
          "https://{%ref%}.supabase.co",
          "{%jwt%}",
          { auth: { persistSession: false } },
        );
        """,
        ref=str(claims["ref"]),
        jwt=S("supabase_service_key", f.jwt(claims)),
    )


def js_basic_auth_buffer(f: Fake) -> list[Part]:
    return fill(
        """
        const auth = Buffer.from("{%user%}:{%pw%}").toString("base64");
        const res = await fetch("https://{%host%}/api/export", {
          headers: { Authorization: `Basic ${auth}` },
        });
        """,
        user=f.user(),
        pw=S("password", f.password()),
        host=f.host(),
    )


def js_jwt_verify(f: Fake) -> list[Part]:
    return fill(
        """
        // token copied from postman: {%tok%}
        const decoded = jwt.verify(req.headers.authorization.split(" ")[1], "{%sec%}");
        """,
        tok=S("jwt", f.jwt()),
        sec=S("jwt_secret", f.alnum(32)),
    )


def ts_aws_sdk_v3(f: Fake) -> list[Part]:
    return fill(
        """
        const s3 = new S3Client({
          region: "{%region%}",
          credentials: {
            accessKeyId: "{%kid%}",
            secretAccessKey: "{%sec%}",
            sessionToken: "{%st%}",
          },
        });
        """,
        region=f.region(),
        kid=S("aws_access_key_id", f.aws_key_id("ASIA")),
        sec=S("aws_secret_key", f.aws_secret()),
        st=S("aws_session_token", f.aws_session_token()),
    )


def js_discord_bot(f: Fake) -> list[Part]:
    bot_id = f.b64(14).rstrip("=")
    return fill(
        """
        client.once(Events.ClientReady, (c) => console.log(`Ready as ${c.user.tag}`));
        client.login("{%tok%}");
        """,
        tok=S("discord_bot_token", f"MT{bot_id}.{f.urlsafe(6)}.{f.urlsafe(38)}"),
    )


def ts_openrouter_fetch(f: Fake) -> list[Part]:
    return fill(
        """
        const res = await fetch("https://openrouter.ai/api/v1/chat/completions", {
          method: "POST",
          headers: {
            Authorization: "Bearer {%key%}",
            "X-Request-Id": "{%rid%}",
          },
          body: JSON.stringify({ model: "meta-llama/llama-3.1-70b-instruct", messages }),
        });
        """,
        key=S("openrouter_key", "sk-or-v1-" + f.hex(64)),
        rid=N("request_id", f.uuid()),
    )


def ts_env_placeholder(f: Fake) -> list[Part]:
    return fill(
        """
        const apiKey = process.env.{%name%} ?? "{%ph%}";
        if (apiKey === "{%ph2%}") throw new Error("set {%name2%} in .env.local");
        """,
        name=N("env_var_name", "OPENAI_API_KEY"),
        ph=N("placeholder", "<your-api-key>"),
        ph2=N("placeholder", "<your-api-key>"),
        name2=N("env_var_name", "OPENAI_API_KEY"),
    )


def ts_linear_contentful(f: Fake) -> list[Part]:
    return fill(
        """
        const linear = new LinearClient({ apiKey: "{%lin%}" });
        const cma = contentful.createClient({ accessToken: "{%cf%}" });
        const space = await cma.getSpace("{%space%}");
        """,
        lin=S("linear_api_key", "lin_api_" + f.alnum(40)),
        cf=S("contentful_token", "CFPAT-" + f.urlsafe(43)),
        space=f.lower(12),
    )


def js_sentry_release(f: Fake) -> list[Part]:
    return fill(
        """
        Sentry.init({
          environment: "production",
          release: "web@{%ver%}+{%sha%}",
          tracesSampleRate: 0.2,
        });
        """,
        ver=N("semver", f.semver()),
        sha=N("git_sha", f.short_sha()),
    )


def js_slack_bolt(f: Fake) -> list[Part]:
    return fill(
        """
        const app = new App({
          token: "{%bot%}",
          signingSecret: "{%sig%}",
          appToken: "{%app%}",
          socketMode: true,
        });
        const admin = new WebClient("{%user%}");
        """,
        bot=S("slack_bot_token", f.slack_bot()),
        sig=S("slack_signing_secret", f.hex(32)),
        app=S("slack_app_token", f"xapp-1-A{f.upper(10)}-{f.digits(13)}-{f.hex(64)}"),
        user=S("slack_user_token", f.slack_user()),
    )


def js_twilio_api_key(f: Fake) -> list[Part]:
    return fill(
        """
        // API key {%sid%} created {%ts%}
        const client = twilio("{%sid%}", "{%sec%}", {
          accountSid: process.env.TWILIO_ACCOUNT_SID,
        });
        """,
        sid=N("twilio_key_sid", "SK" + f.hex(32)),
        ts=N("timestamp", f.timestamp()),
        sec=S("twilio_api_secret", f.alnum(32)),
    )


CODE4_TEMPLATES: list[tuple[str, Template]] = [
    ("javascript", js_express_session),
    ("javascript", js_octokit),
    ("javascript", js_firebase_config),
    ("typescript", ts_supabase_admin),
    ("javascript", js_basic_auth_buffer),
    ("javascript", js_jwt_verify),
    ("typescript", ts_aws_sdk_v3),
    ("javascript", js_discord_bot),
    ("typescript", ts_openrouter_fetch),
    ("typescript", ts_env_placeholder),
    ("typescript", ts_linear_contentful),
    ("javascript", js_sentry_release),
    ("javascript", js_slack_bolt),
    ("javascript", js_twilio_api_key),
]
