"""Stream declarations: `core` (spec 4.1) and `rewards` (spec 4.2), and the tap's list of them."""

from __future__ import annotations

from tap_guestdata.stream.base import GuestDataStream
from tap_guestdata.streams import core, rewards

# The SDK syncs streams in name order; what several streams need (venues, offers, the
# programme answer) is read once per run whichever comes first (Runtime.lookup).
STREAM_TYPES: list[type[GuestDataStream]] = [
    core.Account,
    core.Venues,
    core.Guests,
    core.DailyStats,
    core.DailyAccountStats,
    core.ReadWindows,
    rewards.Programme,
    rewards.ProgrammeVenues,
    rewards.Tiers,
    rewards.Offers,
    rewards.OfferStats,
    rewards.Members,
    rewards.MemberLedger,
    rewards.Rewards,
    rewards.Redemptions,
]
