"""The protocol's JSON Schemas are standard (issue 26 §1): JSON Schema 2020-12 documents that
Python's ``jsonschema`` accepts and ajv compiles in its default strict mode (node, with ajv
from ``npm install`` in tests/js: .ci/run does it), with every property typed and described;
``client.d.ts`` is their current TypeScript, and compiles with ``tsc --strict``.  The messages of whole random matches, and the
settlements of the example scripts, validate in both validators.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import fakeredis
import jsonschema
import pytest

from engine.rules.cards import RANK_LABELS
from engine.service.publish import Publisher
from gateway import protocol
from gateway.outbox import parse_entry
from gateway.schemas_gen import SCHEMA_DIR, TYPES_FILE, generate, load, render, rejection_codes, typescript
from tests.strategies import Step, match_specs, play_match

ROOT = Path(__file__).resolve().parents[1]
AJV_CHECK = ROOT / "tests" / "js" / "check_schemas.mjs"
NAMES = ("client.json", "server.json", "view.json", "events.json")


def _ajv(*corpus: Path) -> dict[str, Any]:
    node = shutil.which("node")
    assert node, "node is needed (apt-get install nodejs; .ci/run installs it)"
    assert (ROOT / "tests" / "js" / "node_modules" / "ajv").is_dir(), \
        "ajv is not installed: run `npm install` in tests/js (.ci/run does it)"
    out = subprocess.run([node, str(AJV_CHECK), *map(str, corpus)], capture_output=True, text=True, timeout=120)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0 and not report["errors"], report["errors"][:5]
    return report


def test_the_committed_schemas_and_types_are_the_generated_ones() -> None:
    for name, schema in generate().items():
        assert (SCHEMA_DIR / name).read_text(encoding="utf-8") == render(schema), \
            f"gateway/schemas/{name} is stale: run python -m gateway.schemas_gen"
    assert TYPES_FILE.read_text(encoding="utf-8") == typescript(), \
        "gateway/static/js/client.d.ts is stale: run python -m gateway.schemas_gen"


@pytest.mark.parametrize("name", NAMES)
def test_each_schema_is_json_schema_2020_12_without_discriminator(name: str) -> None:
    schema = load(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert '"discriminator"' not in json.dumps(schema)


def _properties(node: Any, path: str):
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            yield f"{path}.{name}", prop
        for k, v in node.items():
            yield from _properties(v, f"{path}/{k}")
    elif isinstance(node, list):
        for v in node:
            yield from _properties(v, path)


@pytest.mark.parametrize("name", NAMES)
def test_every_property_is_typed_and_described(name: str) -> None:
    typed = ("type", "const", "enum", "$ref", "anyOf", "oneOf")
    props = list(_properties(load(name), name))
    assert len(props) > 20
    assert [p for p, s in props if not s.get("description")] == []
    assert [p for p, s in props if not any(k in s for k in typed)] == []
    # the enumerations a client switches on are enums, not free strings (a rejection's reason is
    # for a person: its code is the enum)
    # a private table's code and a vote's asker are data, not a switch (issue 39)
    data = ("JoinTable.code", "private_table.code", "series.by")
    for p, s in props:
        if "$ref" not in s and not p.endswith(("rejected.reason", *data)) and p.rsplit(".", 1)[-1] in ("kind", "phase", "reason", "code", "by", "kou", "policy", "reading_kind",
                                    "state", "role", "mode", "trustee", "rank"):
            text = json.dumps(s)
            assert '"enum"' in text or '"const"' in text, f"{p} is a free string"


def test_ajv_compiles_every_schema_in_strict_mode() -> None:
    assert _ajv()["compiled"] == list(NAMES)


def test_client_d_ts_compiles_with_tsc_strict_and_types_a_client() -> None:
    tsc = ROOT / "tests" / "js" / "node_modules" / ".bin" / "tsc"
    assert tsc.exists(), "typescript is not installed: run `npm install` in tests/js (.ci/run does it)"
    out = subprocess.run([str(tsc), "--noEmit", "--strict", "--target", "es2022", "--module", "nodenext",
                          "--moduleResolution", "nodenext", "--lib", "es2022,dom",
                          str(ROOT / "tests" / "js" / "types" / "use_client.ts")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


def test_rejection_codes_and_rank_labels_are_the_engines() -> None:
    from engine.match.errors import NotYourTurn, StaleCommand

    codes = rejection_codes()
    assert {NotYourTurn.code, StaleCommand.code, protocol.NOT_ALLOWED, "internal_error"} <= set(codes)
    assert list(protocol.RankLabel.__args__) == [*RANK_LABELS, "T"]
    client = jsonschema.Draft202012Validator(load("client.json"))
    assert client.is_valid({"type": "Play", "text": "5 5 5 5", "reading_kind": "bomb", "reading_rank": "5"})
    assert not client.is_valid({"type": "Play", "text": "5 5 5 5", "reading_kind": "bombe"})
    assert not client.is_valid({"type": "Play", "text": "5 5 5 5", "reading_rank": "1"})


def _messages(step: Step, publisher: Publisher) -> list[dict[str, Any]]:
    """What the gateway sends each player for one step (protocol.update of the parsed entries)."""
    out = step.outcome
    if out.rejection is not None or not out.events:
        return []
    wire = []
    for write in publisher.outputs(step.command, out):
        if write.fields.get("kind") != "update":
            continue
        fields = {k.encode(): (v if isinstance(v, bytes) else str(v).encode()) for k, v in write.fields.items()}
        e = parse_entry(b"1-0", fields)
        wire.append(protocol.update(e.match, int(e.version or 0), e.events, e.view, "c1", e.brief))
    return json.loads(json.dumps(wire, default=list))


def test_the_messages_of_whole_matches_and_settlements_validate_in_both(tmp_path: Path) -> None:
    from hypothesis import HealthCheck, given, settings

    from projections.settlement import settle
    from projections.views import breakdown_for

    server = jsonschema.Draft202012Validator(load("server.json"))
    corpus: list[dict[str, Any]] = []
    publisher = Publisher(fakeredis.FakeRedis(), consumer="t", full_view_every=7)

    @settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(match_specs())
    def one_match(spec):
        events: list[Any] = []

        def on_step(step: Step) -> None:
            events.extend(step.outcome.events if step.outcome.rejection is None else ())
            corpus.extend(_messages(step, publisher))

        play_match(spec, on_step=on_step)
        result = settle(events)
        if result is not None:
            for who in (result.winner, result.loser, None):
                corpus.append(json.loads(json.dumps(protocol.settled(
                    result.match_id, dict(result.scores), breakdown_for(result.breakdown, who), {}))))

    one_match()
    assert {m["kind"] for m in corpus} == {"update", "settled"}
    for m in corpus:
        server.validate(m)
    lines = tmp_path / "corpus.jsonl"
    lines.write_text("".join(json.dumps({"schema": "server.json", "message": m}) + "\n" for m in corpus))
    # the check can fail: a free string where the schema says enum
    bad = dict(corpus[0], brief={**corpus[0]["brief"], "phase": "lunch"})
    assert not server.is_valid(bad)
    assert _ajv(lines)["validated"] == len(corpus)


def _lobby_messages_the_engine_sends() -> list[dict[str, Any]]:
    """Every ``lobby`` message shape the engine writes (engine/service/lobby_notes.py
    ``messages_of``, with each reason its events' types allow) and the gateway's own answers
    to a Sync or a connect from a player at no table's match (gateway/session.py)."""
    from typing import get_args

    from engine.lobby import events as ev
    from engine.lobby.state import TableState
    from engine.service.lobby_notes import messages_of
    from gateway.lobby import Place, Table
    from gateway.session import waiting_message

    base = {"seq": 2, "ts": 5, "command_id": "pm:x"}
    events: list[Any] = [ev.PlayerQueued(aggregate="queue:points", player="a", since=0, reason=r, **base)
                         for r in get_args(ev.PlayerQueued.model_fields["reason"].annotation)]
    events += [ev.PlayerLeftQueue(aggregate="queue:points", player="a", reason=r, **base)
               for r in get_args(ev.DequeueReason)]
    events += [ev.LeftWithTable(aggregate="queue:points", player="a", table="t1", reason=r, **base)
               for r in get_args(ev.LeftWithTable.model_fields["reason"].annotation)]
    table = TableState(table="t1", room="points", players=("a", "bot:x"), bot="bot:x", n=1, match="t1-1",
                       status="closed")
    closes = [ev.TableClosed(aggregate="table:t1", reason="left", removed=(("a", r),), stayed=(), bot="bot:x",
                             dealt=False, **base) for r in get_args(ev.RemovalReason)]
    closes.append(ev.TableClosed(aggregate="table:t1", reason="left", removed=(("a", "left"),), stayed=("b",),
                                 dealt=True, **base))
    out = [m for e in events for _p, m in messages_of(e, None)]
    out += [m for e in closes for _p, m in messages_of(e, table)]
    creating = Table(id="t1", room="points", players=("a", "b"), n=1, match="t1-1", status="creating",
                     finished="", escaped="")
    out += [waiting_message(Place(state, room, t), "s1") for state, room, t in (
        ("", None, None), ("", "points", None), ("queued", "points", None), ("table", "points", creating),
        ("table", "points", None))]
    return out


def test_every_lobby_reason_the_engine_sends_validates() -> None:
    """The ``lobby`` messages the code builds validate (their reasons are the schema's enum,
    engine.service.lobby_notes.LOBBY_REASONS), and every reason of the enum is one of them."""
    from engine.service.lobby_notes import LOBBY_REASONS

    server = jsonschema.Draft202012Validator(load("server.json"))
    sent = _lobby_messages_the_engine_sends()
    for msg in sent:
        assert not list(server.iter_errors(msg)), (msg, [e.message for e in server.iter_errors(msg)])
    produced = {m["reason"] for m in sent} - {None}
    assert produced | {"already_seated", "already_queued"} == set(LOBBY_REASONS)  # those two: lobby_worker
    assert {m["state"] for m in sent} == {"queued", "removed"}
    bad = {**sent[0], "reason": "not in a room"}
    assert list(server.iter_errors(bad)), "free text must not validate as a reason"


def test_every_server_message_kind_is_counted_under_its_own_label() -> None:
    """``shuangkou_gateway_messages_out_total{kind}`` has a label for each kind server.json
    allows (an ack or a rating was counted ``other``)."""
    from gateway.metrics import GatewayMetrics

    kinds = [d["$ref"].rsplit("/", 1)[1] for d in load("server.json")["oneOf"]]
    m = GatewayMetrics()
    for k in kinds:
        m.message_out(k)
    text = m.exposition().decode()
    for k in kinds:
        assert f'shuangkou_gateway_messages_out_total{{kind="{k}"}} 1.0' in text, k
    assert 'shuangkou_gateway_messages_out_total{kind="other"} 0.0' in text
