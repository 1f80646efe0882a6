"""Held-out set 3, configuration: .env files, Compose, Kubernetes, CI (GitHub Actions, GitLab,
CircleCI), Dockerfiles, Spring, .NET, package-manager and tool credential files, Terraform,
Ansible, WireGuard, Helm, Maven, lock files (see secrets_holdout3.py)."""

from __future__ import annotations

from secrets_holdout3 import (
    ALNUM,
    HEX,
    LOWER_DIGITS,
    Fake3,
    N,
    Part,
    S,
    Template,
    b64,
)


def dotenv_web(f: Fake3) -> list[Part]:
    return [
        "NODE_ENV=production\nAPP_VERSION=",
        N("version", f.version()),
        "\nBUILD_SHA=",
        N("git_sha", f.git_sha()),
        "\nDATABASE_URL=postgres://shop:",
        S("password_in_url", f.pick(ALNUM, 24)),
        "@shop-db.cluster-c1x2y3.eu-west-1.rds.amazonaws.com:5432/shop\nREDIS_URL=redis://:",
        S("password_in_url", f.pick(LOWER_DIGITS, 20)),
        "@cache:6379/0\nSECRET_KEY_BASE=",
        S("generic_secret", f.hex_secret(128)),
        "\nSTRIPE_SECRET_KEY=",
        S("stripe_key", f.stripe_key()),
        "\nNEXT_PUBLIC_STRIPE_PUBLISHABLE_KEY=",
        N("publishable_key", "pk_live_51" + f.pick(ALNUM, 97)),
        "\n",
    ]


def dotenv_ai(f: Fake3) -> list[Part]:
    name, key = f.llm_key()
    return [
        "# .env.local\nOPENAI_API_KEY=",
        S("openai_key", f.openai_key()),
        "\nANTHROPIC_API_KEY=",
        S("anthropic_key", f.anthropic_key()),
        "\nHUGGINGFACEHUB_API_TOKEN=",
        S("huggingface_token", f.huggingface_token()),
        f"\n{name}=",
        S("llm_vendor_key", key),
        "\nCOHERE_API_KEY=",
        S("llm_vendor_key", f.pick(ALNUM, 40)),
        "\nLANGCHAIN_PROJECT=",
        N("long_identifier", "support-bot-eval-" + f.date()),
        "\nEMBEDDING_MODEL=text-embedding-3-small\n",
    ]


def dotenv_example(f: Fake3) -> list[Part]:
    return [
        "# .env.example: copy to .env and fill in\nOPENAI_API_KEY=",
        N("placeholder", f.one(["sk-...", "sk-your-key-here", "<your-openai-key>"])),
        "\nGITHUB_TOKEN=",
        N("placeholder", f.one(["ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "<github-pat>"])),
        "\nDATABASE_URL=postgres://user:",
        N("placeholder", f.one(["password", "changeme", "<password>"])),
        "@localhost:5432/app\nAWS_ACCESS_KEY_ID=",
        N("vendor_example_key", "AKIAIOSFODNN7EXAMPLE"),
        "\nAWS_SECRET_ACCESS_KEY=",
        N("vendor_example_key", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        "\nSLACK_BOT_TOKEN=",
        N("placeholder", f.one(["xoxb-your-token", "xoxb-not-a-real-token-this-will-not-work"])),
        "\nJWT_SECRET=",
        N("placeholder", f.one(["REPLACE_ME", "change-this-in-production", "TODO"])),
        "\n",
    ]


def compose(f: Fake3) -> list[Part]:
    return [
        "services:\n  db:\n    image: postgres:16@sha256:",
        N("sha256", f.sha256()),
        "\n    environment:\n      POSTGRES_USER: app\n      POSTGRES_PASSWORD: ",
        S("password", f.password(symbols="!%^*@")),
        "\n  mq:\n    image: rabbitmq:3-management\n    environment:\n"
        "      RABBITMQ_DEFAULT_USER: app\n      RABBITMQ_DEFAULT_PASS: ",
        N("env_reference", "${RABBITMQ_PASS:?set it in .env}"),
        "\n  minio:\n    image: minio/minio:RELEASE.",
        N("date", f.date()),
        "\n    environment:\n      MINIO_ROOT_USER: admin\n      MINIO_ROOT_PASSWORD: '",
        S("password", f.password()),
        "'\n",
    ]


def k8s_secret(f: Fake3) -> list[Part]:
    password = f.password()
    return [
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: payments-db\n  uid: ",
        N("uuid", f.uuid()),
        '\n  resourceVersion: "',
        N("numeric_id", str(f.num(1000000, 9999999))),
        '"\ntype: Opaque\ndata:\n  username: ',
        N("username", "cGF5bWVudHM="),
        "\n  password: ",
        S("password", b64(password.encode())),
        "\nstringData:\n  api-token: ",
        S("bearer_token", f.opaque_token()),
        "\n",
    ]


def k8s_deployment(f: Fake3) -> list[Part]:
    return [
        "spec:\n  template:\n    metadata:\n      labels:\n        pod-template-hash: ",
        N("short_sha", f.pick(LOWER_DIGITS, 10)),
        "\n    spec:\n      containers:\n        - name: api\n"
        "          image: ghcr.io/acme/api@sha256:",
        N("sha256", f.sha256()),
        "\n          env:\n            - name: DB_PASSWORD\n              valueFrom:\n"
        "                secretKeyRef:\n                  name: api-db\n                  key: ",
        N("secret_name", "password"),
        '\n            - name: DD_API_KEY\n              value: "',
        S("datadog_key", f.datadog_key(32)),
        '"\n            - name: DD_APP_KEY\n              value: "',
        S("datadog_key", f.datadog_key(40)),
        '"\n',
    ]


def gha_workflow(f: Fake3) -> list[Part]:
    return [
        "name: release\non:\n  push:\n    tags: ['v*']\njobs:\n  publish:\n"
        "    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@",
        N("git_sha", f.git_sha()),
        " # v4.1.7\n      - uses: actions/setup-node@",
        N("git_sha", f.git_sha()),
        "\n      - run: npm publish\n        env:\n          NODE_AUTH_TOKEN: ",
        N("env_reference", "${{ secrets.NPM_TOKEN }}"),
        "\n      - name: sonar\n        env:\n          SONAR_TOKEN: ",
        S("sonar_token", "squ_" + f.pick(HEX, 40)),
        "\n        run: sonar-scanner -Dsonar.projectKey=acme_api\n",
    ]


def gitlab_ci(f: Fake3) -> list[Part]:
    return [
        'variables:\n  DEPLOY_TOKEN: "',
        S("gitlab_token", f.gitlab_token()),
        '"\n\nrelease:\n  stage: deploy\n  script:\n    - \'curl --header "PRIVATE-TOKEN: ',
        S("gitlab_token", "glpat-" + f.pick(ALNUM + "-_", 20)),
        '" "https://gitlab.acme.dev/api/v4/projects/',
        N("numeric_id", str(f.num(100, 9999))),
        "/releases\"'\n    - 'curl --header \"JOB-TOKEN: ",
        N("env_reference", "$CI_JOB_TOKEN"),
        '" "$CI_API_V4_URL/projects/$CI_PROJECT_ID/packages"\'\n',
    ]


def circleci(f: Fake3) -> list[Part]:
    return [
        "jobs:\n  deploy:\n    docker:\n      - image: cimg/base:",
        N("date", f.date()[:7].replace("-", ".")),
        "\n    environment:\n      HEROKU_APP_NAME: acme-api\n      HEROKU_API_KEY: ",
        S("heroku_key", f.heroku_key()),
        '\n    steps:\n      - run: echo "',
        N("env_reference", "$DOCKERHUB_PASSWORD"),
        '" | docker login -u acmebot --password-stdin\n',
    ]


def dockerfile(f: Fake3) -> list[Part]:
    return [
        "FROM node:20-alpine@sha256:",
        N("sha256", f.sha256()),
        "\nARG ",
        N("secret_name", "NPM_TOKEN"),
        '\nRUN echo "//registry.npmjs.org/:_authToken=',
        S("npm_token", f.npm_token()),
        '" > .npmrc && npm ci && rm .npmrc\nENV MAPBOX_TOKEN=',
        S(
            "mapbox_token",
            "sk.eyJ1IjoiYWNtZSIsImEiOiJ" + f.pick(ALNUM, 20) + "." + f.pick(ALNUM, 22),
        ),
        "\nRUN curl -fsSLo /tmp/tini "
        "https://github.com/krallin/tini/releases/download/v0.19.0/tini \\\n"
        ' && echo "',
        N("sha256", f.sha256()),
        '  /tmp/tini" | sha256sum -c -\n',
    ]


def spring_yaml(f: Fake3) -> list[Part]:
    return [
        "spring:\n  datasource:\n"
        "    url: jdbc:postgresql://pg:5432/inventory\n    username: inventory\n"
        "    password: ",
        S("password", f.password(symbols="!%^*@")),
        "\n  mail:\n    host: smtp.office365.com\n    password: '",
        S("password", f.password()),
        "'\njwt:\n  secret: ",
        S("generic_secret", f.b64_secret(64)),
        "\neureka:\n  client:\n    serviceUrl:\n      defaultZone: http://eureka:",
        S("password_in_url", f.pick(ALNUM, 16)),
        "@discovery:8761/eureka/\n",
    ]


def appsettings(f: Fake3) -> list[Part]:
    return [
        '{\n  "ConnectionStrings": {\n'
        '    "Default": "Server=sql01;Database=Crm;User Id=crm_app;Password=',
        S("password", f.password(symbols="!#%^*@$")),
        ';TrustServerCertificate=True",\n    "Blobs": "DefaultEndpointsProtocol=https;'
        "AccountName=acmeprodfiles;AccountKey=",
        S("azure_storage_key", f.azure_storage_key()),
        ';EndpointSuffix=core.windows.net"\n  },\n  "AzureAd": {\n    "TenantId": "',
        N("uuid", f.uuid()),
        '",\n    "ClientId": "',
        N("uuid", f.uuid()),
        '",\n    "ClientSecret": "',
        S("azure_client_secret", f.azure_client_secret()),
        '"\n  }\n}\n',
    ]


def azurite(f: Fake3) -> list[Part]:
    return [
        "# local dev against Azurite, the storage emulator's well-known account\n"
        "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        "AccountKey=",
        N(
            "vendor_example_key",
            "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
        ),
        ";BlobEndpoint=http://localhost:10000/devstoreaccount1;\n# prod SAS for the export job\n"
        "EXPORT_SAS_URL=https://acmeexports.blob.core.windows.net/exports?sv=2022-11-02&ss=b&srt=co"
        "&sp=rl&se=2025-12-31T00:00:00Z&spr=https&sig=",
        S("azure_sas_token", f.azure_sas_sig()),
        "\n",
    ]


def npmrc_pypirc(f: Fake3) -> list[Part]:
    return [
        "# ~/.npmrc\n//registry.npmjs.org/:_authToken=",
        S("npm_token", f.npm_token()),
        "\n@acme:registry=https://npm.pkg.github.com\n//npm.pkg.github.com/:_authToken=",
        S("github_token", f.github_token()),
        "\n\n# ~/.pypirc\n[pypi]\nusername = __token__\npassword = ",
        S("pypi_token", f.pypi_token()),
        "\n",
    ]


def pip_conf(f: Fake3) -> list[Part]:
    return [
        "[global]\nextra-index-url = https://__token__:",
        S("gitlab_token", "glpat-" + f.pick(ALNUM + "-_", 20)),
        "@gitlab.acme.dev/api/v4/projects/42/packages/pypi/simple\n\n# requirements.txt\n"
        "requests==2.32.3 \\\n    --hash=sha256:",
        N("sha256", f.sha256()),
        " \\\n    --hash=sha256:",
        N("sha256", f.sha256()),
        "\n",
    ]


CONFIG_TEMPLATES: list[tuple[str, Template]] = [
    (".env", dotenv_web),
    (".env ai", dotenv_ai),
    (".env.example", dotenv_example),
    ("docker-compose.yml", compose),
    ("k8s secret", k8s_secret),
    ("k8s deployment", k8s_deployment),
    ("github actions", gha_workflow),
    ("gitlab ci", gitlab_ci),
    ("circleci", circleci),
    ("Dockerfile", dockerfile),
    ("spring application.yml", spring_yaml),
    ("appsettings.json", appsettings),
    ("azure env", azurite),
    (".npmrc/.pypirc", npmrc_pypirc),
    ("pip.conf", pip_conf),
]
