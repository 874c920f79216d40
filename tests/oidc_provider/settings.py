"""Settings of the stand-in provider (tests/oidc_provider). Everything that varies comes from
the environment the test sets: OIDC_PROVIDER_DIR (its sqlite database), OIDC_PROVIDER_ISSUER
(http://127.0.0.1:<port>/o) and OIDC_PROVIDER_RSA_KEY (a PEM private key)."""

from __future__ import annotations

import os
from pathlib import Path

DIR = Path(os.environ["OIDC_PROVIDER_DIR"])
SECRET_KEY = "oidc-provider-for-tests-only"
DEBUG = True  # runserver serves the toolkit's stylesheet; nothing here is public
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DIR / "provider.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"
USE_TZ = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # a test's: fast
LOGIN_URL = "/accounts/login/"
# Its cookies are named apart from Notebook's, though the browser keeps them apart by host.
SESSION_COOKIE_NAME = "provider_session"
CSRF_COOKIE_NAME = "provider_csrftoken"
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_ISS_ENDPOINT": os.environ["OIDC_PROVIDER_ISSUER"],
    "OIDC_RSA_PRIVATE_KEY": os.environ["OIDC_PROVIDER_RSA_KEY"],
    "PKCE_REQUIRED": True,
    "SCOPES": {
        "openid": "Sign you in",
        "email": "Your email address",
        "profile": "Your user name",
    },
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_provider.validator.Validator",
}
