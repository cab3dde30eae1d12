"""The read API's credential parsing (pure): only a well-formed bearer header yields a token."""

from __future__ import annotations

from tidings.watcher.auth import MAX_TOKEN_BYTES, Authorizer, bearer


def test_only_a_bearer_header_yields_a_token() -> None:
    assert bearer("Bearer abc.def") == "abc.def"
    assert bearer("bearer  abc ") == "abc"
    for header in (None, "", "Bearer", "Bearer ", "Basic YWxpY2U6cHc=", "abc", "Token abc"):
        assert bearer(header) == "", header


def test_missing_or_oversized_tokens_are_refused_without_asking_the_api_server() -> None:
    class NoAPI:
        def request(self, *a: object, **kw: object) -> object:
            raise AssertionError("the API server must not be asked")

    auth = Authorizer(NoAPI())  # type: ignore[arg-type]
    assert auth.check(None, "ns", "t").code == 401
    assert auth.check("Basic x", "ns", "t").reason == "no_token"
    huge = auth.check("Bearer " + "x" * (MAX_TOKEN_BYTES + 1), "ns", "t")
    assert (huge.code, huge.reason) == (401, "bad_token")
