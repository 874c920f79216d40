"""A local server speaking the provider's side of OpenID Connect's code flow (discovery, JWKS,
token, userinfo), for tests of the rules single sign-on applies to what a provider says.

The browser's part (the provider's login page) is skipped: `authorize` stands in for it and
returns the code the provider would have redirected back with. What it then hands out is
scripted per login: the claims, and what is wrong with the ID token (another issuer, another
audience, a stale nonce) or with userinfo (another subject). The token endpoint checks the
client's secret, the redirect URI and the PKCE verifier as a real provider does. (The real
provider, django-oauth-toolkit, drives the browser test: tests/e2e/test_sso.py.)
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

CLIENT_ID = "notebook-tests"
CLIENT_SECRET = "s3cret-for-tests"


@dataclass
class Login:
    nonce: str
    challenge: str
    redirect_uri: str
    claims: dict[str, Any]
    id_token: dict[str, Any]  # overrides of the ID token's own claims (iss, aud, nonce, sub)
    userinfo: dict[str, Any]  # overrides of what userinfo says


@dataclass
class FakeProvider:
    issuer: str = ""
    key: Any = None
    logins: dict[str, Login] = field(default_factory=dict)
    tokens: dict[str, Login] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    down: bool = False  # every request answers 503

    def authorize(
        self,
        params: dict[str, list[str]],
        claims: dict[str, Any],
        *,
        id_token: dict[str, Any] | None = None,
        userinfo: dict[str, Any] | None = None,
    ) -> str:
        """What the provider's login page does: check the request, return the code."""
        assert params["client_id"] == [CLIENT_ID]
        assert params["response_type"] == ["code"]
        assert params["code_challenge_method"] == ["S256"]
        assert "openid" in params["scope"][0].split()
        code = secrets.token_urlsafe(16)
        self.logins[code] = Login(
            nonce=params["nonce"][0],
            challenge=params["code_challenge"][0],
            redirect_uri=params["redirect_uri"][0],
            claims=claims,
            id_token=id_token or {},
            userinfo=userinfo or {},
        )
        return code

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "id_token_signing_alg_values_supported": ["RS256"],
        }

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": "test-key", "alg": "RS256", "use": "sig"}]}

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            return 401, {"error": "invalid_client"}
        login = self.logins.pop(form.get("code", ""), None)  # a code works once
        verifier = form.get("code_verifier", "")
        digest = hashlib.sha256(verifier.encode()).digest()
        challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        if login is None or login.challenge != challenge:
            return 400, {"error": "invalid_grant"}
        if login.redirect_uri != form.get("redirect_uri"):
            return 400, {"error": "invalid_grant"}
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": CLIENT_ID,
            "iat": now,
            "exp": now + 300,
            "nonce": login.nonce,
            **login.claims,
            **login.id_token,
        }
        id_token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "test-key"})
        access = secrets.token_urlsafe(16)
        self.tokens[access] = login
        return 200, {"access_token": access, "token_type": "Bearer", "id_token": id_token}

    def userinfo(self, authorization: str) -> tuple[int, dict[str, Any]]:
        login = self.tokens.get(authorization.removeprefix("Bearer "))
        if login is None:
            return 401, {"error": "invalid_token"}
        return 200, {**login.claims, **login.userinfo}


@contextmanager
def fake_oidc_provider() -> Iterator[FakeProvider]:
    state = FakeProvider(key=rsa.generate_private_key(public_exponent=65537, key_size=2048))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            state.requests.append(f"GET {self.path}")
            if state.down:
                return self._json(503, {"error": "down"})
            if self.path == "/.well-known/openid-configuration":
                return self._json(200, state.discovery())
            if self.path == "/jwks":
                return self._json(200, state.jwks())
            if self.path == "/userinfo":
                return self._json(*state.userinfo(self.headers.get("Authorization", "")))
            return self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            state.requests.append(f"POST {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            form = {k: v[-1] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            if state.down:
                return self._json(503, {"error": "down"})
            if self.path == "/token":
                return self._json(*state.token(form))
            return self._json(404, {"error": "not found"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.issuer = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
