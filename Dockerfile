# slack-handoff: one image for every process (the bot, the worker, the HTTP API).
#   docker build -t slack-handoff .
#   docker run -p 3000:3000 -e REDIS_URL=... -e SLACK_BOT_TOKEN=... -e SLACK_SIGNING_SECRET=... slack-handoff
#   docker run --no-healthcheck -e REDIS_URL=... -e SLACK_BOT_TOKEN=... slack-handoff handoff worker
#   docker run -p 127.0.0.1:3002:3002 -e REDIS_URL=... \
#     --health-cmd "python -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:3002/healthz', timeout=4)\"" \
#     slack-handoff handoff api --host 0.0.0.0
# The API needs no Slack token; put TLS in front of it (docs/deployment.md, "The HTTP API").
# The worker imports your resume targets: build your agent's image FROM this one (or install
# slack-handoff into it). See docs/deployment.md.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY handlers ./handlers
COPY store ./store
COPY worker ./worker
RUN pip install ".[mcp]" && rm -rf /src

RUN useradd --create-home --uid 10001 --user-group handoff
USER handoff
WORKDIR /home/handoff

# 3000: `handoff serve` (the default command); 3002: `handoff api`.
EXPOSE 3000 3002
# GET /healthz answers 200 while Redis answers, 503 otherwise (HTTP mode only; disable it
# for `handoff worker` and for Socket Mode, which serve no HTTP; for `handoff api`, point it
# at port 3002 as above).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:3000/healthz', timeout=4)"]

CMD ["handoff", "serve", "--host", "0.0.0.0", "--port", "3000"]
