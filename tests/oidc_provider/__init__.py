"""A tiny OpenID Connect provider (django-oauth-toolkit) that the single sign-on browser test
runs in a process of its own, standing in for a remote identity provider: its own settings,
its own sqlite database in a temporary directory, its RSA key made by the test."""
