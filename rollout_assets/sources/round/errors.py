"""The error of the round reader: a round whose evidence is corrupt."""

from __future__ import annotations

from rollout_assets.errors import RoundError


class RoundInputError(RoundError, ValueError):
    """A round's evidence is corrupt: the message names the file and what is wrong with it."""
