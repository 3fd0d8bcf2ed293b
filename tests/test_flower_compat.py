"""The door to Flower's internals absorbs the differences between releases: the field that names
the replies to pull (1.43 renamed it) and what a Fleet API 403 means (1.43 added one that is not
about the run)."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")

import httpx  # noqa: E402

from fedmc.flower.compat import pull_replies_request, refuses_run  # noqa: E402


def test_the_pull_request_names_the_replies_in_this_releases_field():
    request = pull_replies_request({"b", "a"})
    if "reply_to_message_ids" in request.DESCRIPTOR.fields_by_name:  # 1.43
        assert list(request.reply_to_message_ids.vals) == ["a", "b"]
        assert pull_replies_request([]).HasField("reply_to_message_ids")  # matches nothing
    else:
        assert list(request.message_ids) == ["a", "b"]


def _response(status: int, **body) -> httpx.Response:
    return httpx.Response(status, json=body or None)


@pytest.mark.parametrize("code", [2007, 2008, 2009])
def test_a_403_for_the_run_refuses_the_run(code):
    assert refuses_run(_response(403, code=code, detail="The current run status ..."))


def test_other_refusals_are_not_about_the_run():
    assert not refuses_run(_response(403, code=2011, detail="Message source node ID ..."))
    assert not refuses_run(_response(401, code=2007, detail="..."))
    assert not refuses_run(_response(412, code=2004, detail="Failed to activate"))
