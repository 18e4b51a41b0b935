"""The names and ids the simulated cluster hands out: the words topic, group and connector names are made of, client
hosts, commit metadata, and Kafka's ids (`Uuid`, java `UUID` strings in member ids). Every one is drawn from the
cluster's seeded generator."""
from __future__ import annotations

import base64
from random import Random

SERVICES = ("orders", "payments", "billing", "inventory", "shipping", "search", "fraud", "ledger", "notifications",
            "analytics", "audit", "recommendations", "pricing", "catalog", "checkout", "sessions", "clickstream",
            "metrics", "alerts", "reporting", "identity", "risk", "loyalty", "returns")
ENTITIES = ("events", "commands", "changelog", "cdc", "enriched", "dlq", "state", "audit-log", "snapshots", "v2")
ROLES = ("consumer", "processor", "indexer", "etl", "sink", "aggregator", "projector", "router")
UNICODE_TAGS = ("ñandú", "ομάδα", "消费者组", "그룹", "🚀launch", "cafe\u0301", "Zürich", "данные")
HOSTS = ("/10.0.{}.{}", "/172.16.{}.{}", "/192.168.{}.{}")
METADATA = ("", "", "", "", "", "\u0000", "ok\u0000", "batch-{n}", '{"src":"svc","n":{n}}', "ckpt:{n}",
            "répertoire-{n}", "")


def random_uuid(rng: Random) -> bytes:
    """`Uuid.randomUuid`'s 16 bytes."""
    while True:
        raw = rng.getrandbits(128).to_bytes(16, "big")
        # Kafka's Uuid.randomUuid never hands out ZERO/ONE nor an id whose string starts with '-'
        if raw[0] >> 2 != 62 and raw not in (bytes(16), bytes(15) + b"\x01"):
            return raw


def uuid_str(raw: bytes) -> str:
    """`Uuid.toString`: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def random_uuid_str(rng: Random) -> str:
    return uuid_str(random_uuid(rng))


def random_java_uuid(rng: Random) -> str:
    """`java.util.UUID.randomUUID().toString()`, as classic member ids end."""
    h = rng.getrandbits(128).to_bytes(16, "big").hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"
