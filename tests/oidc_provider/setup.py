"""Prepare the stand-in provider's database: `python -m tests.oidc_provider.setup <redirect_uri>
<client_id> <client_secret> <username> <password> <email>` (with the provider's environment)
migrates it and registers the user and the OIDC application."""

from __future__ import annotations

import os
import sys

import django


def main(redirect_uri: str, client_id: str, secret: str, username: str, password: str,
         email: str) -> None:  # fmt: skip
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_provider.settings"
    django.setup()
    # After django.setup(): these read the provider's settings and its app registry.
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    User.objects.create_user(username=username, password=password, email=email)
    Application.objects.create(
        name="Notebook",
        client_id=client_id,
        client_secret=secret,
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=redirect_uri,
        algorithm=Application.RS256_ALGORITHM,
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
