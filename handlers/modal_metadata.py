"""What a modal remembers of where it was opened, sealed so a submission cannot lie about it.

A ``view_submission`` carries no channel and no message: the handoff id, the channel the
modal was opened from (it decides the escalation rule "anyone in the escalation channel may
decide") and the person it was opened for travel in ``private_metadata``. Slack returns that
string untouched, but it is only as trustworthy as the request around it, so it carries an
HMAC of the three, made with a key derived from the app's signing secret. A submission whose
metadata was not sealed by us for this handoff, channel and person is refused.

Example::

    key = metadata_key(settings.slack_signing_secret)
    view["private_metadata"] = seal(key, ModalOrigin("ho_01J...", "C0APPROVALS", "U0ALICE"))
    opened = unseal(key, view["private_metadata"], user="U0ALICE")  # a ModalOrigin, or None
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass

MAX_METADATA_CHARS = 3000
"""Slack's limit on ``private_metadata``; anything longer was not sent by Slack."""

_PURPOSE = b"slack-handoff modal metadata v1"


@dataclass(frozen=True)
class ModalOrigin:
    """The handoff a modal was opened for, the channel it was opened from (None: the App
    Home), the person it was opened for, and for an approval the digest of the arguments
    it showed (``Handoff.current_digest``)."""

    handoff_id: str
    channel: str | None
    user: str
    digest: str | None = None


def metadata_key(secret: str) -> bytes:
    """The sealing key, derived from a secret every ``handoff serve`` process shares (the
    signing secret, or the app token in Socket Mode)."""
    return hmac.new(secret.encode(), _PURPOSE, hashlib.sha256).digest()


def seal(key: bytes | None, origin: ModalOrigin) -> str:
    """``private_metadata`` for a modal opened for ``origin``."""
    fields = {"handoff_id": origin.handoff_id, "channel": origin.channel, "user": origin.user}
    if origin.digest is not None:
        fields["digest"] = origin.digest
    if key is not None:
        fields["seal"] = _mac(key, origin)
    return json.dumps(fields)


def unseal(key: bytes | None, private_metadata: object, *, user: str) -> ModalOrigin | None:
    """Where the modal that ``user`` submitted was opened, or None when its metadata was not
    sealed by us for them (garbage, too long, another person's, or altered)."""
    if not isinstance(private_metadata, str) or len(private_metadata) > MAX_METADATA_CHARS:
        return None
    try:
        fields = json.loads(private_metadata)
    except (ValueError, RecursionError):
        return None
    if not isinstance(fields, dict):
        return None
    handoff_id, channel, opened_for = (fields.get(k) for k in ("handoff_id", "channel", "user"))
    digest = fields.get("digest")
    if not isinstance(handoff_id, str) or not isinstance(channel, str | None):
        return None
    if not isinstance(digest, str | None) or opened_for != user:
        return None
    origin = ModalOrigin(handoff_id, channel, user, digest)
    if key is not None:
        mac = fields.get("seal")
        if not isinstance(mac, str) or not hmac.compare_digest(
            mac.encode(), _mac(key, origin).encode()
        ):
            return None
    return origin


def _mac(key: bytes, origin: ModalOrigin) -> str:
    sealed = [origin.handoff_id, origin.channel, origin.user]
    if origin.digest is not None:  # sealed too (modals opened before it was kept had none)
        sealed.append(origin.digest)
    message = json.dumps(sealed).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:32]
