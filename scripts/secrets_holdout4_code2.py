"""holdout4 templates: Go, Java, Kotlin, C#, Rust, Swift and Scala source snippets."""

from __future__ import annotations

from secrets_holdout4 import ALNUM, Fake, N, Part, S, Template, fill


def go_stripe_restricted(f: Fake) -> list[Part]:
    return fill(
        """
        func init() {
            stripe.Key = "{%key%}"
        }

        func refund(id string) (*stripe.Refund, error) {
            return refund.New(&stripe.RefundParams{PaymentIntent: stripe.String("{%pi%}")})
        }
        """,
        key=S("stripe_restricted_key", f.stripe_key("rk_live_")),
        pi=N("stripe_object_id", "pi_" + f.alnum(24)),
    )


def go_mysql_dsn(f: Fake) -> list[Part]:
    return fill(
        """
        db, err := sql.Open("mysql", "{%user%}:{%pw%}@tcp({%host%}:3306)/orders?parseTime=true")
        if err != nil {
            log.Fatalf("open: %v", err)
        }
        """,
        user=f.user(),
        pw=S("password", f.password()),
        host=f.host(),
    )


def go_jwt_hmac(f: Fake) -> list[Part]:
    return fill(
        """
        var signingKey = []byte("{%key%}")

        func Sign(claims jwt.MapClaims) (string, error) {
            return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(signingKey)
        }
        """,
        key=S("jwt_secret", f.pick((f.alnum(32), f.passphrase()))),
    )


def go_aws_static(f: Fake) -> list[Part]:
    return fill(
        """
        cfg, err := config.LoadDefaultConfig(ctx,
            config.WithRegion("{%region%}"),
            config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(
                "{%kid%}", "{%sec%}", "")),
        )
        """,
        region=f.region(),
        kid=S("aws_access_key_id", f.aws_key_id()),
        sec=S("aws_secret_key", f.aws_secret()),
    )


def go_sum_lookalike(f: Fake) -> list[Part]:
    return fill(
        """
        github.com/google/uuid v{%v1%} h1:{%h1%}
        github.com/google/uuid v{%v1b%}/go.mod h1:{%h2%}
        golang.org/x/crypto v0.{%minor%}.0 h1:{%h3%}
        """,
        v1=N("semver", "1.6.0"),
        h1=N("go_sum_hash", f.b64(32)),
        v1b=N("semver", "1.6.0"),
        h2=N("go_sum_hash", f.b64(32)),
        minor=str(f.num(20, 40)),
        h3=N("go_sum_hash", f.b64(32)),
    )


def go_grpc_metadata(f: Fake) -> list[Part]:
    return fill(
        """
        const ddAPIKey = "{%key%}"

        ctx = metadata.AppendToOutgoingContext(ctx, "dd-api-key", ddAPIKey,
            "x-request-id", "{%rid%}")
        """,
        key=S("datadog_api_key", f.hex(32)),
        rid=N("request_id", f.uuid()),
    )


def go_vault_client(f: Fake) -> list[Part]:
    return fill(
        """
        client, _ := vault.NewClient(&vault.Config{Address: "https://vault.example.net:8200"})
        client.SetToken("{%tok%}")
        secret, err := client.KVv2("kv").Get(ctx, "payments/{%name%}")
        """,
        tok=S("vault_token", "hvs." + f.pick((f.alnum(24), "CAESI" + f.urlsafe(86)))),
        name=f.word(),
    )


def go_test_vectors(f: Fake) -> list[Part]:
    return fill(
        """
        var cases = []struct{ in, want string }{
            {"hello", "{%a%}"},
            {"", "{%b%}"},
        }
        // fixture commit {%sha%}
        """,
        a=N("sha256", f.sha256()),
        b=N("sha256", f.sha256()),
        sha=N("git_sha", f.git_sha()),
    )


def java_jdbc_driver_manager(f: Fake) -> list[Part]:
    return fill(
        """
        Connection conn = DriverManager.getConnection(
            "jdbc:postgresql://{%host%}:5432/{%db%}", "{%user%}", "{%pw%}");
        """,
        host=f.host(),
        db=f.word(),
        user=f.user(),
        pw=S("password", f.password()),
    )


def java_jedis(f: Fake) -> list[Part]:
    return fill(
        """
        try (Jedis jedis = pool.getResource()) {
            jedis.auth("{%pw%}");
            jedis.set("session:" + sessionId, payload);
        }
        """,
        pw=S("password", f.password()),
    )


def java_okhttp_databricks(f: Fake) -> list[Part]:
    return fill(
        """
        Request request = new Request.Builder()
            .url("https://adb-{%ws%}.{%n%}.azuredatabricks.net/api/2.1/jobs/run-now")
            .header("Authorization", "Bearer {%tok%}")
            .post(body)
            .build();
        """,
        ws=f.digits(16),
        n=str(f.num(1, 19)),
        tok=S("databricks_token", "dapi" + f.hex(32)),
    )


def java_keystore(f: Fake) -> list[Part]:
    return fill(
        """
        KeyStore ks = KeyStore.getInstance("PKCS12");
        try (InputStream in = new FileInputStream("{%path%}")) {
            ks.load(in, "{%pw%}".toCharArray());
        }
        """,
        path=N("file_path", f"/etc/{f.word()}/tls/keystore.p12"),
        pw=S("keystore_password", f.password()),
    )


def java_paypal(f: Fake) -> list[Part]:
    return fill(
        """
        PayPalEnvironment env = new PayPalEnvironment.Live(
            "A{%cid%}",
            "{%sec%}");
        """,
        cid=f.urlsafe(79),
        sec=S("paypal_client_secret", "E" + f.urlsafe(79)),
    )


def java_mailgun(f: Fake) -> list[Part]:
    return fill(
        """
        MailgunMessagesApi api = MailgunClient.config("{%key%}")
            .createApi(MailgunMessagesApi.class);
        """,
        key=S("mailgun_key", f.pick(("key-" + f.hex(32), f"{f.hex(32)}-{f.hex(8)}-{f.hex(8)}"))),
    )


def kotlin_notion(f: Fake) -> list[Part]:
    return fill(
        """
        object Secrets {
            const val NOTION_TOKEN = "{%tok%}"
            const val DATABASE_ID = "{%db%}"
        }
        """,
        tok=S(
            "notion_token", f.pick(("secret_" + f.alnum(43), f"ntn_{f.digits(11)}" + f.alnum(35)))
        ),
        db=N("notion_id", f.hex(32)),
    )


def kotlin_build_config(f: Fake) -> list[Part]:
    return fill(
        """
        android {
            defaultConfig {
                versionCode = {%code%}
                versionName = "{%ver%}"
                buildConfigField("String", "MAPS_API_KEY", "\\"{%key%}\\"")
            }
        }
        """,
        code=N("build_number", str(f.num(100, 9000))),
        ver=N("semver", f.semver()),
        key=S("google_api_key", f.google_key()),
    )


def kotlin_okta(f: Fake) -> list[Part]:
    return fill(
        """
        val oidc = OidcConfiguration(
            issuer = "https://{%org%}.okta.com/oauth2/default",
            clientId = "0oa{%cid%}",
            clientSecret = "{%sec%}",
        )
        val admin = OktaClient(apiToken = "{%tok%}")
        """,
        org=f.word(),
        cid=f.alnum(17),
        sec=S("oauth_client_secret", f.urlsafe(64)),
        tok=S("okta_api_token", "00" + f.urlsafe(40)),
    )


def csharp_sql_connection(f: Fake) -> list[Part]:
    return fill(
        """
        var cs = "Server=tcp:{%srv%}.database.windows.net,1433;Initial Catalog={%db%};" +
                 "User ID={%user%};Password={%pw%};Encrypt=True;Connection Timeout=30;";
        await using var conn = new SqlConnection(cs);
        """,
        srv=f.word(),
        db=f.word(),
        user=f.user(),
        pw=S("password", f.password()),
    )


def csharp_blob_client(f: Fake) -> list[Part]:
    return fill(
        """
        var blobs = new BlobServiceClient(
            "DefaultEndpointsProtocol=https;AccountName={%acct%};" +
            "AccountKey={%key%};EndpointSuffix=core.windows.net");
        """,
        acct=f.word() + f.lower(6),
        key=S("azure_storage_key", f.azure_storage_key()),
    )


def csharp_client_secret_credential(f: Fake) -> list[Part]:
    return fill(
        """
        var credential = new ClientSecretCredential(
            tenantId: "{%tenant%}",
            clientId: "{%client%}",
            clientSecret: "{%sec%}");
        """,
        tenant=N("uuid", f.uuid()),
        client=N("uuid", f.uuid()),
        sec=S("azure_client_secret", f.azure_secret()),
    )


def rust_reqwest_hf(f: Fake) -> list[Part]:
    return fill(
        """
        // reqwest = "{%ver%}"
        let resp = client
            .post("https://api-inference.huggingface.co/models/gpt2")
            .bearer_auth("{%tok%}")
            .json(&payload)
            .send()
            .await?;
        """,
        ver=N("semver", f.semver()),
        tok=S("huggingface_token", "hf_" + f.alnum(34)),
    )


def rust_const_secrets(f: Fake) -> list[Part]:
    return fill(
        """
        const WEBHOOK_SECRET: &str = "{%wh%}";
        const BUILD_ID: &str = "{%sha%}";
        const REPLICATE_TOKEN: &str = "{%rep%}";
        """,
        wh=S("stripe_webhook_secret", "whsec_" + f.alnum(32)),
        sha=N("git_sha", f.git_sha()),
        rep=S("replicate_token", "r8_" + f.alnum(37)),
    )


def swift_anthropic(f: Fake) -> list[Part]:
    return fill(
        """
        enum Config {
            static let anthropicKey = "{%key%}"
            static let bundleID = "com.{%w%}.ios"
        }
        """,
        key=S("anthropic_key", f.anthropic_key()),
        w=f.word(),
    )


def swift_keychain_lookalike(f: Fake) -> list[Part]:
    return fill(
        """
        let query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword,
            kSecAttrService as String: "com.{%w%}.auth",
            kSecAttrAccount as String: "{%acct%}",
        ]
        // accent {%color%}, install id {%iid%}
        """,
        w=f.word(),
        acct=N("uuid", f.uuid()),
        color=N("css_color", f.css_color()),
        iid=N("uuid", f.uuid()),
    )


def scala_slick(f: Fake) -> list[Part]:
    return fill(
        """
        val db = Database.forURL(
          url = "jdbc:postgresql://{%host%}/reporting",
          user = "{%user%}",
          password = "{%pw%}",
          driver = "org.postgresql.Driver"
        )
        """,
        host=f.host(),
        user=f.user(),
        pw=S("password", f.password()),
    )


def scala_kafka_sasl(f: Fake) -> list[Part]:
    return fill(
        """
        props.put("security.protocol", "SASL_SSL")
        props.put("sasl.mechanism", "PLAIN")
        props.put("sasl.jaas.config",
          "org.apache.kafka.common.security.plain.PlainLoginModule required " +
          "username=\\"{%user%}\\" password=\\"{%sec%}\\";")
        """,
        user=f.upper(16),
        sec=S("confluent_api_secret", f.chars(ALNUM + "+/", 64)),
    )


def java_spring_test_lookalike(f: Fake) -> list[Part]:
    return fill(
        """
        @TestPropertySource(properties = {
            "app.api-key={%ph%}",
            "app.trace-id={%tid%}",
            "app.version={%ver%}"
        })
        class PaymentServiceTest { }
        """,
        ph=N("placeholder", f.pick(("test-api-key", "${API_KEY}", "<api-key>"))),
        tid=N("trace_id", f.trace_id()),
        ver=N("semver", f.semver()),
    )


CODE2_TEMPLATES: list[tuple[str, Template]] = [
    ("go", go_stripe_restricted),
    ("go", go_mysql_dsn),
    ("go", go_jwt_hmac),
    ("go", go_aws_static),
    ("go", go_sum_lookalike),
    ("go", go_grpc_metadata),
    ("go", go_vault_client),
    ("go", go_test_vectors),
    ("java", java_jdbc_driver_manager),
    ("java", java_jedis),
    ("java", java_okhttp_databricks),
    ("java", java_keystore),
    ("java", java_paypal),
    ("java", java_mailgun),
    ("kotlin", kotlin_notion),
    ("kotlin", kotlin_build_config),
    ("kotlin", kotlin_okta),
    ("csharp", csharp_sql_connection),
    ("csharp", csharp_blob_client),
    ("csharp", csharp_client_secret_credential),
    ("rust", rust_reqwest_hf),
    ("rust", rust_const_secrets),
    ("swift", swift_anthropic),
    ("swift", swift_keychain_lookalike),
    ("scala", scala_slick),
    ("scala", scala_kafka_sasl),
    ("java", java_spring_test_lookalike),
]
