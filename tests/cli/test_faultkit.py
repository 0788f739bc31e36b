"""The test suite's own rule for skips that would hide coverage (faultkit.needs_privilege):
a missing capability skips as a non-root user and fails as root unless explicitly allowed."""

import pytest

import faultkit
from faultkit import ALLOW_PRIVILEGED_SKIPS, needs_privilege


@pytest.mark.parametrize("euid, allowed, outcome", [
    (1000, None, pytest.skip.Exception),
    (0, None, pytest.fail.Exception),
    (0, "1", pytest.skip.Exception),
])
def test_missing_capability_skips_only_where_it_cannot_be_expected(monkeypatch, euid, allowed,
                                                                  outcome):
    monkeypatch.setattr(faultkit.os, "geteuid", lambda: euid)
    if allowed is None:
        monkeypatch.delenv(ALLOW_PRIVILEGED_SKIPS, raising=False)
    else:
        monkeypatch.setenv(ALLOW_PRIVILEGED_SKIPS, allowed)
    with pytest.raises(outcome, match="no CAP_NET_ADMIN"):
        needs_privilege("no CAP_NET_ADMIN")
    needs_privilege(None)        # the capability is there: nothing happens
