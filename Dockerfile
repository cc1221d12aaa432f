# The service image, for places with an image registry. (This repository's own machines have
# none: there the service runs from the virtual environment, see README.)
FROM python:3.11-slim

WORKDIR /app
COPY pyproject.toml README.md ./
# Every package of the wheel (pyproject.toml; tests/test_packaging.py checks the two agree).
COPY proto ./proto
COPY server ./server
COPY sandbox ./sandbox
COPY browser_relay ./browser_relay
COPY fs_gateway ./fs_gateway
COPY evals ./evals
COPY instance_ai_client ./instance_ai_client
COPY instance_ai_cli ./instance_ai_cli
COPY n8n_bridge ./n8n_bridge
# With the browser tools (Playwright drives the user's browser through the relay over CDP:
# no browser is installed here).
RUN pip install --no-cache-dir '.[browser]' && useradd --uid 1000 --create-home instance-ai \
    && mkdir /data && chown instance-ai /data

USER instance-ai
# Sandboxes need a Docker engine: mount its socket (-v /var/run/docker.sock:...) or set
# DOCKER_HOST; without one, set INSTANCE_AI_SANDBOX_PROVIDER=none.
# Without API keys the server binds loopback only, which a container cannot be reached on:
# set INSTANCE_AI_API_KEYS (or mount a key file and set INSTANCE_AI_API_KEYS_FILE).
ENV INSTANCE_AI_HOST=0.0.0.0 \
    INSTANCE_AI_DATA_DIR=/data \
    INSTANCE_AI_LOG_FORMAT=json
VOLUME /data
EXPOSE 50051
HEALTHCHECK --interval=30s --timeout=5s CMD ["instance-ai", "health"]
ENTRYPOINT ["instance-ai", "serve"]
