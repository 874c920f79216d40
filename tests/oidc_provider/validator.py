"""The provider's claims: the user's email address (verified) and username."""

from __future__ import annotations

from typing import Any

from oauth2_provider.oauth2_validators import OAuth2Validator


class Validator(OAuth2Validator):  # type: ignore[misc]  # the toolkit is untyped
    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        user = request.user
        return {
            "email": user.email,
            "email_verified": True,
            "preferred_username": user.username,
        }
