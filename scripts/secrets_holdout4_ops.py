"""holdout4 templates: CI pipelines (GitHub Actions, GitLab, Jenkins, ...) and curl calls."""

from __future__ import annotations

import base64

from secrets_holdout4 import Fake, N, Part, S, Template, fill


def gha_hardcoded_npm(f: Fake) -> list[Part]:
    return fill(
        """
        jobs:
          publish:
            runs-on: ubuntu-latest
            steps:
              - uses: actions/checkout@{%sha%} # v4.2.2
              - uses: actions/setup-node@{%sha2%}
              - run: npm publish --access public
                env:
                  NODE_AUTH_TOKEN: {%tok%}
                  GH_TOKEN: {%ref%}
        """,
        sha=N("git_sha", f.git_sha()),
        sha2=N("git_sha", f.git_sha()),
        tok=S("npm_token", "npm_" + f.alnum(36)),
        ref=N("secret_reference", "${{ secrets.GITHUB_TOKEN }}"),
    )


def gha_references_only(f: Fake) -> list[Part]:
    return fill(
        """
        - name: Cache deps
          uses: actions/cache@{%sha%}
          with:
            path: ~/.cache/pip
            key: pip-${{ runner.os }}-${{ hashFiles('**/requirements.txt') }}
        - name: Deploy
          env:
            AWS_ACCESS_KEY_ID: {%r1%}
            AWS_SECRET_ACCESS_KEY: {%r2%}
          run: ./deploy.sh --build {%build%}
        """,
        sha=N("git_sha", f.git_sha()),
        r1=N("secret_reference", "${{ secrets.AWS_ACCESS_KEY_ID }}"),
        r2=N("secret_reference", "${{ secrets.AWS_SECRET_ACCESS_KEY }}"),
        build=N("build_number", str(f.num(100, 9999))),
    )


def gha_docker_login(f: Fake) -> list[Part]:
    return fill(
        """
        - uses: docker/login-action@v3
          with:
            username: {%user%}
            password: {%pat%}
        - uses: docker/build-push-action@v6
          with:
            tags: acme/api:{%ver%}
        """,
        user=f.word(),
        pat=S("docker_hub_token", "dckr_pat_" + f.urlsafe(27)),
        ver=N("semver", f.semver()),
    )


def gha_deploy_tokens(f: Fake) -> list[Part]:
    return fill(
        """
        env:
          PULUMI_ACCESS_TOKEN: {%pul%}
          FLY_API_TOKEN: "FlyV1 {%fly%}"
          VERCEL_TOKEN: {%vc%}
          NETLIFY_AUTH_TOKEN: {%nf%}
        """,
        pul=S("pulumi_token", "pul-" + f.hex(40)),
        fly=S("fly_token", "fm2_" + f.b64(120)),
        vc=S("vercel_token", f.alnum(24)),
        nf=S("netlify_token", "nfp_" + f.alnum(36)),
    )


def gitlab_ci_sonar(f: Fake) -> list[Part]:
    return fill(
        """
        variables:
          SONAR_TOKEN: "{%sonar%}"
          SONAR_HOST_URL: "https://sonarcloud.io"

        release:
          image: registry.gitlab.com/acme/tools@{%digest%}
          script:
            - 'curl --header "PRIVATE-TOKEN: {%gl%}" "$CI_API_V4_URL/projects/$CI_PROJECT_ID"'
        """,
        sonar=S("sonar_token", "sqp_" + f.hex(40)),
        digest=N("docker_digest", f.docker_digest()),
        gl=S("gitlab_token", f.gitlab_token()),
    )


def gitlab_runner_register(f: Fake) -> list[Part]:
    return fill(
        r"""
        sudo gitlab-runner register \
          --non-interactive \
          --url "https://gitlab.example.com/" \
          --token "{%tok%}" \
          --executor "docker" \
          --docker-image alpine:{%ver%}
        """,
        tok=S("gitlab_runner_token", f.gitlab_token("glrt-")),
        ver=N("version", f"3.{f.num(15, 21)}"),
    )


def gitlab_deploy_token_clone(f: Fake) -> list[Part]:
    return fill(
        """
        before_script:
          - git clone https://gitlab+deploy-token-{%n%}:{%tok%}@gitlab.com/acme/shared-config.git
          - cd shared-config && git checkout {%sha%}
        """,
        n=f.digits(7),
        tok=S("gitlab_deploy_token", f.gitlab_token("gldt-")),
        sha=N("git_sha", f.git_sha()),
    )


def jenkinsfile_curl(f: Fake) -> list[Part]:
    return fill(
        """
        pipeline {
          agent any
          stages {
            stage('Trigger downstream') {
              steps {
                sh "curl -X POST -u admin:{%tok%} https://ci.example.net/job/deploy/build"
                echo "build ${env.BUILD_NUMBER} at {%sha%}"
              }
            }
          }
        }
        """,
        tok=S("jenkins_api_token", "11" + f.hex(32)),
        sha=N("git_sha", f.git_sha()),
    )


def circleci_codecov(f: Fake) -> list[Part]:
    return fill(
        """
        version: 2.1
        orbs:
          codecov: codecov/codecov@{%ver%}
        jobs:
          test:
            environment:
              CODECOV_TOKEN: {%tok%}
              SNYK_TOKEN: {%snyk%}
        """,
        ver=N("semver", f"4.{f.num(0, 2)}.{f.num(0, 9)}"),
        tok=S("codecov_token", f.uuid()),
        snyk=S("snyk_token", f.uuid()),
    )


def azure_pipelines(f: Fake) -> list[Part]:
    return fill(
        """
        variables:
          AZURE_DEVOPS_EXT_PAT: {%pat%}
          buildConfiguration: Release
        steps:
          - script: az devops login --organization https://dev.azure.com/acme
          - task: DotNetCoreCLI@2
            inputs: { command: publish, arguments: '-c $(buildConfiguration)' }
        """,
        pat=S("azure_devops_pat", f.chars("abcdefghijklmnopqrstuvwxyz234567", 52)),
    )


def curl_anthropic(f: Fake) -> list[Part]:
    return fill(
        r"""
        curl https://api.anthropic.com/v1/messages \
          -H "x-api-key: {%key%}" \
          -H "anthropic-version: {%ver%}" \
          -H "content-type: application/json" \
          -d '{"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": [...]}'
        """,
        key=S("anthropic_key", f.anthropic_key()),
        ver=N("api_version", "2023-06-01"),
    )


def curl_mailgun(f: Fake) -> list[Part]:
    return fill(
        r"""
        curl -s --user 'api:{%key%}' \
          https://api.mailgun.net/v3/mg.example.com/messages \
          -F from='Ops <ops@example.com>' -F to={%email%} -F subject='nightly report'
        """,
        key=S("mailgun_key", "key-" + f.hex(32)),
        email=f.email(),
    )


def curl_jira_basic(f: Fake) -> list[Part]:
    raw = f"{f.email()}:ATATT3xFfGF0{f.urlsafe(170)}={f.hex(8).upper()}".encode()
    return fill(
        r"""
        curl -s -H "Authorization: Basic {%b64%}" \
          -H "Accept: application/json" \
          "https://acme.atlassian.net/rest/api/3/issue/{%key%}"
        """,
        b64=S("basic_auth", base64.b64encode(raw).decode()),
        key=N("issue_key", f"{f.word().upper()[:4]}-{f.num(10, 9999)}"),
    )


def curl_atlassian_token(f: Fake) -> list[Part]:
    return fill(
        r"""
        curl -u {%email%}:{%tok%} \
          "https://acme.atlassian.net/wiki/rest/api/content/{%pid%}?expand=body.storage"
        """,
        email=f.email(),
        tok=S("atlassian_api_token", f"ATATT3xFfGF0{f.urlsafe(170)}={f.hex(8).upper()}"),
        pid=N("page_id", f.digits(10)),
    )


def curl_google_maps(f: Fake) -> list[Part]:
    return fill(
        """
        curl "https://maps.googleapis.com/maps/api/geocode/json?address=1600+Main+St&key={%key%}"
        """,
        key=S("google_api_key", f.google_key()),
    )


def curl_datadog(f: Fake) -> list[Part]:
    return fill(
        r"""
        curl -X GET "https://api.datadoghq.com/api/v1/monitor/{%mid%}" \
          -H "DD-API-KEY: {%api%}" \
          -H "DD-APPLICATION-KEY: {%app%}"
        """,
        mid=str(f.digits(8)),
        api=S("datadog_api_key", f.hex(32)),
        app=S("datadog_app_key", f.hex(40)),
    )


def curl_client_credentials(f: Fake) -> list[Part]:
    return fill(
        r"""
        curl -X POST https://{%w%}.auth0.com/oauth/token \
          -d grant_type=client_credentials \
          -d client_id={%cid%} \
          -d client_secret={%sec%} \
          -d audience=https://api.example.com/
        """,
        w=f.word(),
        cid=f.alnum(32),
        sec=S("oauth_client_secret", f.urlsafe(64)),
    )


def curl_newrelic_graphql(f: Fake) -> list[Part]:
    return fill(
        r"""
        curl https://api.newrelic.com/graphql \
          -H 'Content-Type: application/json' \
          -H 'API-Key: {%key%}' \
          --data-binary '{"query":"{ actor { account(id: {%acct%}) { name } } }"}'
        """,
        key=S("newrelic_api_key", "NRAK-" + f.upper(27)),
        acct=f.digits(7),
    )


def curl_asana_clickup(f: Fake) -> list[Part]:
    return fill(
        """
        curl -H "Authorization: {%cu%}" https://api.clickup.com/api/v2/team
        curl -H "Authorization: Bearer {%vt%}" https://api.vercel.com/v9/projects
        """,
        cu=S("clickup_token", f"pk_{f.digits(8)}_{f.upper(32)}"),
        vt=S("vercel_token", f.alnum(24)),
    )


def curl_placeholders_only(f: Fake) -> list[Part]:
    return fill(
        r"""
        # from the README:
        curl https://api.openai.com/v1/models \
          -H "Authorization: Bearer {%ph%}" \
          -H "OpenAI-Organization: {%ph2%}"
        """,
        ph=N("placeholder", f.pick(("$OPENAI_API_KEY", "<YOUR_API_KEY>", "sk-xxxxxxxxxxxxxxxx"))),
        ph2=N("placeholder", "$OPENAI_ORG_ID"),
    )


OPS_TEMPLATES: list[tuple[str, Template]] = [
    ("github_actions", gha_hardcoded_npm),
    ("github_actions", gha_references_only),
    ("github_actions", gha_docker_login),
    ("github_actions", gha_deploy_tokens),
    ("gitlab_ci", gitlab_ci_sonar),
    ("shell", gitlab_runner_register),
    ("gitlab_ci", gitlab_deploy_token_clone),
    ("jenkins", jenkinsfile_curl),
    ("circleci", circleci_codecov),
    ("azure_pipelines", azure_pipelines),
    ("curl", curl_anthropic),
    ("curl", curl_mailgun),
    ("curl", curl_jira_basic),
    ("curl", curl_atlassian_token),
    ("curl", curl_google_maps),
    ("curl", curl_datadog),
    ("curl", curl_client_credentials),
    ("curl", curl_newrelic_graphql),
    ("curl", curl_asana_clickup),
    ("curl", curl_placeholders_only),
]
