"""Redis key layout of the event store and the command gateway (docs/PROTOCOL.md, "Key layout").

Every match belongs to one *bucket*: ``bucket = crc32(match_id) % buckets``
(default 16 buckets).  The append script touches the match's own keys **and**
its bucket's feed, deadline set and match set in one call, so on Redis Cluster
all of them must hash to one slot: the hash tag of every key is the bucket tag
``{b<N>}``, never the match id.

==========================================  ======  =============================================
key                                         type    holds
==========================================  ======  =============================================
``sk:{b<N>}:m:<match_id>:events``           stream  the match's events, entry id ``<seq>-1``,
                                                    field ``e`` = msgpack of the event
``sk:{b<N>}:m:<match_id>:cmds``             hash    command id -> ``"<first>-<last>"`` seq range
                                                    (``first = last + 1`` for a command that
                                                    appended no events)
``sk:{b<N>}:m:<match_id>:snap``             string  msgpack ``[version, state bytes]``
``sk:{b<N>}:feed``                          stream  one entry per announced append: ``match``,
                                                    ``from``, ``to`` (seqs), ``fin``; none for a
                                                    match's moves and clock (engine.match.events
                                                    .announced); trimmed only below what every
                                                    projection group acknowledged
``sk:{b<N>}:deadlines``                     zset    member match id, score ``at_ms``
``sk:{b<N>}:deadline_info``                 hash    match id -> ``"<version>|<kind>|<at_ms>"``
``sk:{b<N>}:matches``                       set     ids of the bucket's matches
``sk:{b<N>}:inbox``                         stream  player commands of the bucket's matches
                                                    (consumer group ``sk-service``), read by the
                                                    bucket's owner only (:func:`inbox_key`)
``sk:{b<N>}:ops``                           stream  CreateMatch, Sit, Deal of the bucket's matches
                                                    (same group and format; :func:`ops_key`)
``sk:{b<N>}:owner``                         string  the serve replica holding the bucket's lease
``sk:{b<N>}:t:<table>:events``             stream  a table's events (engine/lobby), as a match's; N =
                                                    :func:`bucket_of` the table id (:func:`table_keys`)
``sk:{b<N>}:t:<table>:cmds``               hash    the table's command ids, as a match's
``sk:{b<N>}:tables``                        set     ids of the bucket's tables
``sk:{b<N>}:lobby:deadlines``               zset    deadlines of the bucket's lobby aggregates (none yet)
``sk:{b<N>}:lobby:deadline_info``           hash    their details, as ``deadline_info``
``sk:{b<N>}:s:<series>:events``            stream  a private table's series (engine/lobby/series.py); N =
                                                    :func:`bucket_of` the series id (:func:`series_keys`)
``sk:{b<N>}:s:<series>:cmds``              hash    the series' command ids
``sk:{b<N>}:series``                        set     ``series:<id>`` of the bucket's series
``sk:{b<N>}:code:<CODE>``                   string  a private table's code -> its series id; N =
                                                    :func:`bucket_of` the code (:func:`code_key`)
``sk:{r:<room>}:q:events``                  stream  a room's queue's events, under the room's own tag
                                                    (:func:`queue_keys`)
``sk:{r:<room>}:q:cmds``                    hash    the queue's command ids
``sk:{r:<room>}:q:snap``                    hash    ``v`` version, ``s`` state bytes: the queue every
                                                    ``engine.service.lobby.QUEUE_SNAPSHOT_EVERY``
                                                    events (:func:`lobby_snapshot_key`)
``sk:{r:<room>}:feed``                      stream  the room's feed (one entry per queue append)
``sk:{r:<room>}:lobby:deadlines``           zset    the queue's timer (``gateway --bots``)
``sk:{r:<room>}:lobby:deadline_info``       hash    its details
``sk:{r:<room>}:queues``                    set     ``queue:<room>`` once the queue has an event
``sk:serve:replicas``                       zset    live serve replicas (name -> registration end ms)
``sk:ops``                                   stream  Credit, Debit, AddRoom (no match: any replica)
``sk:inbox``                                stream  the single player channel before issue 24: still
                                                    drained by serve during an upgrade
``sk:out:{<player_id>}``                    stream  per-player updates and rejections; the player's
                                                    own hash tag (:func:`outbox_key`)
``sk:outv:{<player_id>}``                   hash    match id -> the highest version of its updates on
                                                    the player's stream (less one half when only a
                                                    re-publication wrote it): the fence that keeps a
                                                    player's versions from going back
                                                    (engine/store/publish.lua; :func:`outbox_versions_key`)
``sk:seen:{<player_id>}``                   string  the player's delivery receipt: when a gateway last
                                                    handed their socket an update that starts their
                                                    clock, or closed it (gateway/receipts.py;
                                                    :func:`receipt_key`)
``sk:seen:gw:{<gateway>}``                  string  a gateway process's liveness beat (its last
                                                    beat's ms; engine/service/receipts.py): an
                                                    update it handed over, unacknowledged, is
                                                    undelivered once it stops (:func:`gateway_beat_key`)
``sk:dead``                                 stream  dead letters (raw message + reason)
``sk:{rk:<room>:<season>}:players``        hash    a ranked room's ladder in one season: player ->
                                                    ``[mu, sigma, n]`` (projections/ratings.py)
``sk:{rk:<room>:<season>}:board``          zset    player -> exact rating (the leaderboard)
``sk:{rk:<room>:<season>}:results``        hash    rated match id -> ``[finished_ms, winner, loser, p]``
``sk:{rk:<room>:<season>}:meta``           hash    ``last`` (the last match folded, settlement order)
``sk:{seasons}:list``                       hash    season name -> JSON ``{name, start_ms, end_ms,
                                                    soft_reset}`` (a few keys of metadata)
``sk:{seasons}:ladders``                    set     ``<room>:<season>`` of every ladder kept
``sk:reply:<anything>``                     stream  optional per-gateway replies (``reply_to``;
                                                    :func:`reply_key`, :func:`ops_reply_key`)
``sk:gw:session:{<player_id>}``            stream  which socket of the player's is the current one
                                                    (:func:`gateway_session_key`)
``sk:{b<N>}:deadline_sent``                 hash    the dispatcher's in-flight marks of the bucket's
                                                    deadlines (:func:`deadline_sent_key`)
``sk:timers:dispatcher-lease``              string  the one timer dispatcher's lease
``sk:timers:sweeper-lease``                 string  the one deadline sweeper's lease
``sk:<tag>:acks``                           string  a counter beside a key, written before a WAIT for
                                                    the replicas (:func:`acks_marker_key`)
``sk:rooms``                                hash    room name -> its config JSON (the room registry)
``sk:{ledger}:…``                           …       the ledger (projections/ledger.py): ``settled``,
                                                    ``burned``, ``grants``, ``refs``, ``parked``,
                                                    ``archived``, ``bal:<mode>``, ``journal:<player>``
                                                    (:func:`ledger_key`)
==========================================  ======  =============================================

The bucket count is part of the layout: every process of one deployment must
use the same count (changing it would send a match's appends to another bucket
than its history). The first store to touch a Redis records it under
``sk:layout`` and later stores with a different count refuse to start
(:meth:`engine.store.redis_store.RedisEventStore.check_layout`).

Notices: whoever adds an entry to a stream a gateway reads for its sockets (the player's
``sk:out:…``, the lobby's notes, the session stream; the publisher does it for every entry it
writes) then sends ``SPUBLISH <stream> ""``, a sharded pub/sub message on the channel named
like the stream (on a Cluster it lives in the stream's slot).  It is only a wake-up for the
gateway's one reader (gateway/fanout.py): the stream stays the source of truth.  A reply
stream (``sk:reply:…``) is read by polling (a blocking XREAD): it gets no notice.

Expiry: a player's update stream and reply streams expire when idle (``serve --outbox-ttl``,
default a day).  A plain write sets the stream's TTL again; a fenced update
(engine/store/publish.lua) sets the TTL of the stream and of its fence ``sk:outv:…`` again
only once either's remaining time has fallen below the TTL less a tenth of it (at most an
hour), so such a key expires between ``ttl - min(ttl // 10, 3600)`` and ``ttl`` seconds after
its last write: the script's TTL reads are not replicated, an EXPIRE is (on every replica).

A match id containing ``{`` or ``}`` is harmless: Redis uses the *first*
``{…}`` of a key as its hash tag, which is always the bucket tag here.
A *player* id is a hash tag itself (``sk:out:{alice}``), so a player id with
``{`` or ``}`` is refused wherever one enters (the token, the Join, the inbox:
:func:`player_id_problem`).
"""

from __future__ import annotations

import re
import zlib

PREFIX = "sk"
DEFAULT_BUCKETS = 16

INBOX = f"{PREFIX}:inbox"  # the one player channel before issue 24 (drained during an upgrade)
OPS = f"{PREFIX}:ops"  # the operator channel for commands of no match: Credit, Debit, AddRoom
SERVICE_GROUP = "sk-service"
DEAD_LETTERS = f"{PREFIX}:dead"
REPLY_PREFIX = f"{PREFIX}:reply:"
LAYOUT = f"{PREFIX}:layout"
#: the live serve replicas (zset: name -> the ms their registration runs out; engine/service/ownership.py)
REPLICAS = f"{PREFIX}:serve:replicas"


def bucket_of(match_id: str, buckets: int = DEFAULT_BUCKETS) -> int:
    """The bucket of a match: crc32 of its UTF-8 id modulo the bucket count."""
    return zlib.crc32(match_id.encode("utf-8")) % buckets


def bucket_tag(bucket: int) -> str:
    """The Cluster hash tag of a bucket, e.g. ``{b7}``."""
    return "{b%d}" % bucket


def _match_prefix(match_id: str, bucket: int) -> str:
    return f"{PREFIX}:{{b{bucket}}}:m:{match_id}"


def events_key(match_id: str, bucket: int) -> str:
    return _match_prefix(match_id, bucket) + ":events"


def commands_key(match_id: str, bucket: int) -> str:
    return _match_prefix(match_id, bucket) + ":cmds"


def snapshot_key(match_id: str, bucket: int) -> str:
    return _match_prefix(match_id, bucket) + ":snap"


def feed_key(bucket: int) -> str:
    return f"{PREFIX}:{{b{bucket}}}:feed"


def deadlines_key(bucket: int) -> str:
    return f"{PREFIX}:{{b{bucket}}}:deadlines"


def deadline_info_key(bucket: int) -> str:
    return f"{PREFIX}:{{b{bucket}}}:deadline_info"


def matches_key(bucket: int) -> str:
    return f"{PREFIX}:{{b{bucket}}}:matches"


def inbox_key(bucket: int) -> str:
    """The player channel of one bucket: ``sk:{b<N>}:inbox`` (N = :func:`bucket_of` the command's match)."""
    return f"{PREFIX}:{{b{bucket}}}:inbox"


def is_player_channel(stream: str) -> bool:
    """Whether ``stream`` is the player channel (:func:`inbox_key`, or the old :data:`INBOX`).

    >>> is_player_channel(inbox_key(3)), is_player_channel(INBOX), is_player_channel(ops_key(3))
    (True, True, False)
    """
    return stream == INBOX or (stream.startswith(f"{PREFIX}:{{b") and stream.endswith("}:inbox"))


def ops_key(bucket: int) -> str:
    """The operator channel of one bucket's matches (CreateMatch, Sit, Deal): ``sk:{b<N>}:ops``."""
    return f"{PREFIX}:{{b{bucket}}}:ops"


def owner_key(bucket: int) -> str:
    """The lease naming the serve replica that consumes the bucket's channels."""
    return f"{PREFIX}:{{b{bucket}}}:owner"


#: characters a player id may not hold: the id is a Cluster hash tag (``{<player>}``)
PLAYER_ID_FORBIDDEN = "{}"


def player_id_problem(player_id: str) -> str | None:
    """Why ``player_id`` cannot be a player's id (None: it can).

    >>> player_id_problem("alice") is None
    True
    >>> player_id_problem("a{b}")
    "a player id may not contain '{' or '}' (it is the hash tag of the player's keys), got 'a{b}'"
    """
    if any(ch in player_id for ch in PLAYER_ID_FORBIDDEN):
        return f"a player id may not contain '{{' or '}}' (it is the hash tag of the player's keys), got {player_id!r}"
    return None


#: the ids ``gateway --bots`` gives its bots (``bot-<n>``): reserved, never a token's subject
BOT_ID = re.compile(r"bot-\d+")


def is_bot_id(player_id: str) -> bool:
    """Whether ``player_id`` is a bot seat's id (``bot-<n>``), which no token may claim.

    >>> is_bot_id("bot-17"), is_bot_id("alice"), is_bot_id("bot-x")
    (True, False, False)
    """
    return BOT_ID.fullmatch(player_id) is not None


def player_tag(player_id: str) -> str:
    """The Cluster hash tag of a player's keys, e.g. ``{alice}``."""
    return "{%s}" % player_id


def outbox_key(player_id: str) -> str:
    """The outbound stream of one player (updates and rejections): ``sk:out:{<player>}``.

    Any other key read or written together with it carries the same tag."""
    return f"{PREFIX}:out:{{{player_id}}}"


def outbox_versions_key(player_id: str) -> str:
    """The fence of a player's stream, ``sk:outv:{<player>}``: a hash, match id -> the highest
    version of that match's updates written to the stream, less one half when only a
    re-publication wrote it (engine/store/publish.lua: an update at or below it is refused, a
    player's versions never go back nor come twice).  Same hash tag as the stream."""
    return stream_fence_key(outbox_key(player_id))


def stream_fence_key(stream: str) -> str:
    """The fence of the player's stream named ``stream`` (:func:`outbox_versions_key`).

    >>> stream_fence_key(outbox_key("alice"))
    'sk:outv:{alice}'
    """
    out = f"{PREFIX}:out:"
    if not stream.startswith(out):
        raise ValueError(f"not a player's stream: {stream!r}")
    return f"{PREFIX}:outv:{stream[len(out):]}"


def receipt_key(player_id: str) -> str:
    """The player's delivery receipt ``sk:seen:{<player>}`` (gateway/receipts.py), read by the
    timers with the player's outbound stream (the same hash tag)."""
    return f"{PREFIX}:seen:{{{player_id}}}"


def gateway_beat_key(instance: str) -> str:
    """A gateway process's liveness beat ``sk:seen:gw:{<instance>}`` (gateway/receipts.py): in
    the receipts' key space, so the same ACL rights (the gateway SETs, the timers read)."""
    return f"{PREFIX}:seen:gw:{{{instance}}}"


def entry_id(seq: int) -> str:
    """Stream entry id of the event with sequence number ``seq``."""
    return f"{seq}-1"


def seq_of(entry: bytes | str) -> int:
    """Sequence number of an event stream entry id (``b"12-1"`` -> 12)."""
    if isinstance(entry, bytes):
        entry = entry.decode()
    return int(entry.split("-", 1)[0])


def stream_pos(entry: bytes | str) -> tuple[int, int]:
    """A stream entry id as a comparable ``(ms, n)`` pair (``"17-3"`` -> (17, 3); ``"17"`` -> (17, 0))."""
    if isinstance(entry, bytes):
        entry = entry.decode()
    ms, _, n = entry.partition("-")
    return int(ms), int(n or 0)


# ---- the lobby's aggregates (engine/lobby): tables under their bucket, a queue under its room ----

#: the aggregate kinds whose streams go through the same append script as a match's
LOBBY_KINDS = ("table", "queue", "series")
#: the consumer group of the lobby's feed follower (engine/service/lobby_feed.py)
LOBBY_GROUP = "sk-lobby"


def room_tag(room: str) -> str:
    """The Cluster hash tag of a room's queue, e.g. ``{r:points}``: each room's queue lives on
    its own slot (a room name holding ``}`` only shortens the tag; every key of the room still
    shares it)."""
    return "{r:%s}" % room


def table_bucket(table: str, buckets: int = DEFAULT_BUCKETS) -> int:
    """The bucket of a table: as a match's, crc32 of its id (a table's match ``<table>-<n>``
    has its own bucket)."""
    return bucket_of(table, buckets)


def tables_key(bucket: int) -> str:
    """The set of the bucket's table ids: ``sk:{b<N>}:tables``."""
    return f"{PREFIX}:{{b{bucket}}}:tables"


def table_keys(table: str, buckets: int = DEFAULT_BUCKETS) -> tuple[str, str, str, str, str, str]:
    """The six keys append.lua takes for a table (events, command ids, feed, deadline index,
    deadline details, member set), all under the table's bucket tag.

    >>> table_keys("t9", 16)[0], table_keys("t9", 16)[2]
    ('sk:{b5}:t:t9:events', 'sk:{b5}:feed')
    """
    b = table_bucket(table, buckets)
    tag = bucket_tag(b)
    return (f"{PREFIX}:{tag}:t:{table}:events", f"{PREFIX}:{tag}:t:{table}:cmds", feed_key(b),
            f"{PREFIX}:{tag}:lobby:deadlines", f"{PREFIX}:{tag}:lobby:deadline_info", tables_key(b))


def room_feed_key(room: str) -> str:
    """The feed of a room's queue: ``sk:{r:<room>}:feed`` (fields as a bucket feed's)."""
    return f"{PREFIX}:{room_tag(room)}:feed"


def queue_keys(room: str) -> tuple[str, str, str, str, str, str]:
    """The six keys append.lua takes for a room's queue, all under the room's tag.

    >>> queue_keys("points")[0]
    'sk:{r:points}:q:events'
    """
    tag = room_tag(room)
    return (f"{PREFIX}:{tag}:q:events", f"{PREFIX}:{tag}:q:cmds", room_feed_key(room),
            f"{PREFIX}:{tag}:lobby:deadlines", f"{PREFIX}:{tag}:lobby:deadline_info", f"{PREFIX}:{tag}:queues")


def series_set_key(bucket: int) -> str:
    """The set of the bucket's series: ``sk:{b<N>}:series`` (members ``series:<id>``)."""
    return f"{PREFIX}:{{b{bucket}}}:series"


def series_keys(series: str, buckets: int = DEFAULT_BUCKETS) -> tuple[str, str, str, str, str, str]:
    """The six keys append.lua takes for a private table's series (events, command ids, feed,
    deadline index, deadline details, member set), all under the series' bucket tag.

    >>> series_keys("s9", 16)[0], series_keys("s9", 16)[5]
    ('sk:{b2}:s:s9:events', 'sk:{b2}:series')
    """
    b = bucket_of(series, buckets)
    tag = bucket_tag(b)
    return (f"{PREFIX}:{tag}:s:{series}:events", f"{PREFIX}:{tag}:s:{series}:cmds", feed_key(b),
            f"{PREFIX}:{tag}:lobby:deadlines", f"{PREFIX}:{tag}:lobby:deadline_info", series_set_key(b))


def series_keys_of_bucket(bucket: int) -> tuple[str, str]:
    """The lobby deadline index of a bucket (the zset, the details hash), where a series'
    appends record its join or vote timer (:func:`series_keys` [3], [4])."""
    tag = bucket_tag(bucket)
    return f"{PREFIX}:{tag}:lobby:deadlines", f"{PREFIX}:{tag}:lobby:deadline_info"


def code_key(code: str, buckets: int = DEFAULT_BUCKETS) -> str:
    """The code index of private tables: ``sk:{b<N>}:code:<CODE>`` -> the series id, under the
    bucket of the (upper-case) code, so a JoinTable finds its series in one read.

    >>> code_key("k7m2qx", 16) == code_key("K7M2QX", 16)
    True
    """
    code = code.upper()
    return f"{PREFIX}:{bucket_tag(bucket_of(code, buckets))}:code:{code}"


def lobby_keys(aggregate: str, buckets: int = DEFAULT_BUCKETS) -> tuple[str, str, str, str, str, str]:
    """The append keys of a lobby aggregate id, ``table:<id>``, ``queue:<room>`` or
    ``series:<id>`` (engine/lobby/events.py, engine/lobby/series_events.py); ValueError for
    anything else."""
    kind, _, ident = aggregate.partition(":")
    if not ident:
        raise ValueError(f"not a lobby aggregate id: {aggregate!r}")
    if kind == "table":
        return table_keys(ident, buckets)
    if kind == "queue":
        return queue_keys(ident)
    if kind == "series":
        return series_keys(ident, buckets)
    raise ValueError(f"not a lobby aggregate id: {aggregate!r}")


def lobby_snapshot_key(aggregate: str, buckets: int = DEFAULT_BUCKETS) -> str:
    """Where a lobby aggregate's snapshot is kept: beside its events, in their slot.

    >>> lobby_snapshot_key("queue:points")
    'sk:{r:points}:q:snap'
    """
    events = lobby_keys(aggregate, buckets)[0]
    return events[: -len("events")] + "snap"


# ---- display names (gateway/names.py) and who hides theirs from the leaderboards ----------------
#: hash: player id -> display name (written by the gateways at each connect)
NAMES_KEY = f"{PREFIX}:{{names}}:display"
#: set: the players who hide their name from the leaderboards (docs/RANKED.md)
HIDDEN_NAMES_KEY = f"{PREFIX}:{{names}}:hidden"


# ---- the live lobby: its channel, its read models, presence and bots (docs/ARCHITECTURE.md) ----

def room_bucket(room: str, buckets: int = DEFAULT_BUCKETS) -> int:
    """The bucket whose owner runs a room's queue: crc32 of the room name (one process at a
    time decides the room's pairing, under the bucket's lease)."""
    return bucket_of(room, buckets)


def lobby_inbox_key(bucket: int) -> str:
    """The lobby channel of one bucket: ``sk:{b<N>}:lobby`` (a player's Join, Leave, Returned
    for a room of the bucket, :func:`room_bucket`; entry field ``c``: the command's JSON)."""
    return f"{PREFIX}:{{b{bucket}}}:lobby"


def place_key(player_id: str) -> str:
    """Where the lobby has a player (a hash, under the player's tag beside ``sk:out``):
    ``state`` (``queued`` | ``table``; absent: nowhere), ``room``, ``table``, ``match``, and the
    fence of engine/store/place.lua (``v:<aggregate>``, ``closed``)."""
    return f"{PREFIX}:place:{player_tag(player_id)}"


def place_claim_key(player_id: str) -> str:
    """A player's place claimed by a Join, CreateTable or JoinTable the lobby accepts, until
    the ``place`` read model (or :func:`player_series_key`) says it (a string:
    ``room:<room>`` or ``series:<id>``; expiring), under the player's tag: one place per
    player even for commands handled together or by two lobby threads
    (engine/service/place_claims.py)."""
    return f"{PREFIX}:claim:{player_tag(player_id)}"


def player_series_key(player_id: str) -> str:
    """The private table's series a player is in (a string: the series id; absent: none),
    under the player's tag: how a CancelTable, RequestEnd or VoteEnd, which name no series,
    and a reconnect's resync find it (issue 39)."""
    return f"{PREFIX}:pseries:{player_tag(player_id)}"


def join_attempts_key(who: str) -> str:
    """The JoinTable attempts counter of a player (``p:<id>``) or an address (``a:<ip>``), or a
    player's CreateTable counter (``c:<id>``), in the current window (a string, expiring): the
    gateways' rate limits on private table codes and on opening tables."""
    return f"{PREFIX}:jt:{{{who}}}"


def table_info_key(table: str, buckets: int = DEFAULT_BUCKETS) -> str:
    """A table's read model (a hash under its bucket): ``room``, ``a``, ``b``, ``n``, ``match``,
    ``status`` (creating | seated | between | closed), ``finished``, ``escaped``, ``bot_level``."""
    return f"{PREFIX}:{bucket_tag(table_bucket(table, buckets))}:t:{table}:info"


def presence_key(room: str) -> str:
    """A room's presence: a sorted set player -> the ms their reconnect grace ends (the
    gateways push it forward while the player is connected)."""
    return f"{PREFIX}:{room_tag(room)}:presence"


def bot_offer_key(room: str) -> str:
    """A room's bot offer (``gateway --bots``): JSON ``{"after_ms", "level"}`` with a TTL, kept
    alive by a process that plays bots; the queue seats a bot only while it exists."""
    return f"{PREFIX}:{room_tag(room)}:bots:offer"


def bot_seats_key(room: str) -> str:
    """The bots the room's queue seated (a stream: ``bot``, ``table``, ``match``, ``level``),
    read by the processes that play them (consumer group ``sk-bots``)."""
    return f"{PREFIX}:{room_tag(room)}:bots:seats"


BOTS_GROUP = "sk-bots"


def queue_info_key(room: str) -> str:
    """A room queue's read model (a hash under the room's tag): ``waiting`` (players waiting)."""
    return f"{PREFIX}:{room_tag(room)}:q:info"


# -- the integrity projection (projections/integrity, docs/INTEGRITY.md) --------------------------
#: the consumer group the integrity projection reads the bucket feeds with
INTEGRITY_GROUP = "sk-integrity"
#: zset: pair key ("a|b", ids sorted) -> the pair's current suspicion score (pairs with a score > 0)
INTEGRITY_SCORES = f"{PREFIX}:integrity:scores"
#: hash: signal -> "k n" counts over every person's matches (the prior of every signal)
INTEGRITY_POPULATION = f"{PREFIX}:integrity:population"
#: list: the newest sampled regrets of everyone (the quality baseline of players without their own)
INTEGRITY_POP_REGRETS = f"{PREFIX}:integrity:population:regrets"


def integrity_records_key(player_id: str) -> str:
    """Hash of one player's integrity records, match id -> JSON: ``sk:integrity:m:{<player>}``
    (expires 90 days after the player's last scored match)."""
    return f"{PREFIX}:integrity:m:{{{player_id}}}"


def integrity_pair_key(pair: str) -> str:
    """String: the JSON evidence of one pair (``a|b``) as last scored: ``sk:integrity:pair:<a|b>``
    (expires 30 days after the pair's last match)."""
    return f"{PREFIX}:integrity:pair:{pair}"


def integrity_dismissed_key(pair: str) -> str:
    """Hash: an operator's review of a pair (reason, when, the score then):
    ``sk:integrity:dismissed:<a|b>`` (expires after 180 days)."""
    return f"{PREFIX}:integrity:dismissed:{pair}"


#: the seasons of ranked play (a few fields of metadata; the ladders have their own tags)
SEASONS = f"{PREFIX}:{{seasons}}:list"
LADDERS = f"{PREFIX}:{{seasons}}:ladders"


def ladder_tag(room: str, season: str) -> str:
    """The Cluster hash tag of one ranked room's ladder in one season: ``{rk:<room>:<season>}``
    (room and season names are ``[A-Za-z0-9_.-]``, engine/config.py ``RANKED_NAME``), so the
    ladders of many rooms and seasons spread over the cluster's slots.

    >>> ladder_key("ranked", "s1", "board")
    'sk:{rk:ranked:s1}:board'
    """
    return "{rk:%s:%s}" % (room, season)


def ladder_key(room: str, season: str, part: str) -> str:
    """A key of a ladder: ``part`` is ``players``, ``board``, ``results`` or ``meta``."""
    return f"{PREFIX}:{ladder_tag(room, season)}:{part}"


# ---- the processes' own keys: sessions, timers, replica acks, rooms, the ledger ---------------

def gateway_session_key(player_id: str) -> str:
    """The player's session stream (which socket is the current one), under the player's tag:
    read with ``sk:out:{<player>}``."""
    return f"{PREFIX}:gw:session:{player_tag(player_id)}"


def reply_key(name: str) -> str:
    """A reply stream (``reply_to``): ``sk:reply:<name>``."""
    return REPLY_PREFIX + name


def ops_reply_key(who: str) -> str:
    """An operator channel caller's reply stream: ``sk:reply:ops-<who>`` (the ``lobby`` ACL user
    may read and write these only)."""
    return reply_key(f"ops-{who}")


def deadline_sent_key(bucket: int) -> str:
    """The timer dispatcher's in-flight marks of one bucket (its deadline index's tag)."""
    return f"{PREFIX}:{{b{bucket}}}:deadline_sent"


#: the one timer dispatcher's lease (workers/dispatcher.py)
DISPATCHER_LEASE_KEY = f"{PREFIX}:timers:dispatcher-lease"
#: the one deadline sweeper's lease (workers/sweeper.py)
SWEEPER_LEASE_KEY = f"{PREFIX}:timers:sweeper-lease"


def acks_marker_key(tag: str) -> str:
    """The counter written beside a key of hash tag ``tag`` (``{…}``, or the key itself when it
    has none) before a WAIT for the replicas (engine/store/replicas.py): same slot."""
    return f"{PREFIX}:{tag}:acks"


#: hash: room name -> its config JSON (the room registry, engine/service/rooms.py)
ROOMS_KEY = f"{PREFIX}:rooms"
#: the ledger's hash tag: every ledger key is in one slot (a settlement is one script)
LEDGER_TAG = "{ledger}"


def ledger_key(part: str) -> str:
    """A ledger key: ``sk:{ledger}:<part>`` (``settled``, ``burned``, ``grants``, ``refs``,
    ``parked``, ``archived``, ``bal:<mode>``, ``journal:<player>``)."""
    return f"{PREFIX}:{LEDGER_TAG}:{part}"
