# The llamaherd scheduler, with the first-party plugins, as a container image.
#
#   docker build -t llamaherd .                       # from the repository root
#   docker run --init -v "$PWD/myproject:/project" -p 127.0.0.1:8080:8080 llamaherd
#
# docs/deploying.md has the rest: agents' sandboxes as sibling containers through the mounted
# Docker socket, or host-user runs inside; credentials; compose.yaml (scheduler + PostgreSQL).
#
# Build arguments:
#   BASE         a Debian-based image with Python 3.11+ (python:3.x-slim works; so does Debian's
#                python3 without pip, given a pip wheel in ./wheelhouse)
#   PLUGINS      the plugins/ directories to install
#   PIP_OPTIONS  e.g. "--no-index --find-links /src/wheelhouse" to build without a package
#                index, from wheels of every dependency placed in ./wheelhouse
#   APT_PACKAGES Debian packages added for agents' commands ("" adds none)
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

ARG PLUGINS="cron webhooks github docker host-user anthropic openai scripted dashboard deploy"
ARG PIP_OPTIONS=""
ARG APT_PACKAGES="git openssh-client ca-certificates curl"

# Tools agents' commands commonly use (git clone over https or ssh); APT_PACKAGES="" skips it.
RUN if [ -n "$APT_PACKAGES" ]; then \
        apt-get update -q && apt-get install -y -q --no-install-recommends $APT_PACKAGES \
        && rm -rf /var/lib/apt/lists/*; \
    fi

COPY . /src
RUN set -eu; \
    if python3 -c "import ensurepip" 2>/dev/null; then \
        python3 -m venv /opt/llamaherd; pip="/opt/llamaherd/bin/python -m pip"; \
    else \
        python3 -m venv --without-pip /opt/llamaherd; \
        pip="/opt/llamaherd/bin/python $(ls /src/wheelhouse/pip-*.whl | head -n 1)/pip"; \
    fi; \
    plugins=""; for name in $PLUGINS; do plugins="$plugins /src/plugins/$name"; done; \
    $pip install --no-cache-dir --disable-pip-version-check $PIP_OPTIONS "/src/core[postgres]" $plugins; \
    rm -rf /src /root/.cache

# The scheduler runs as `llamaherd` (uid 1000); as root (--user root) the host-user runtime
# can run agents as `al-agent`, isolated from the scheduler and the credentials.
RUN useradd --create-home --uid 1000 --user-group --shell /bin/sh llamaherd \
    && useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /bin/sh --comment "llamaherd agent runs" al-agent \
    && mkdir -p /project /credentials \
    && chown llamaherd:llamaherd /project

# The project is the working directory (al finds it from there): mount yours at /project.
ENV PATH=/opt/llamaherd/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    AL_CREDENTIALS_DIR=/credentials
USER llamaherd
WORKDIR /project
EXPOSE 8080
# SIGTERM (docker stop) stops gracefully: active runs get --grace seconds, waiting runs keep
# their sandboxes. Give `docker stop -t` / stop_grace_period a little more than --grace.
ENTRYPOINT ["al"]
CMD ["start", "--bind", "0.0.0.0", "--grace", "300"]
