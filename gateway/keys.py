"""API keys and what each may send (--api-keys-file).

The file is one of two formats:

- a list, one key per line (blank lines and lines starting with # are ignored): every key
  without limits, named in metrics by a short hash of itself (``key-1a2b3c4d``);
- TOML (its first entry a table), one table per key, whose name is the key's id in metrics
  (never the key itself), with any of the limits (a whole number above 0; absent: no limit):

      [keys.alice]
      key = "k-alice"
      requests_per_minute = 60
      chars_per_day = 500000

Characters are counted as LibreTranslate counts them: the length of q (of each text of a
list), a document's characters to translate for /translate_file.

Each limit is a token bucket, in memory, per gateway process: it holds a minute's (a day's)
allowance, each request takes its share, and it fills up again evenly over the minute (the
day). A request the buckets cannot cover takes nothing and is refused: 429 with Retry-After,
the whole seconds until they can cover it. One larger than a whole minute's or day's allowance
of characters could never pass: 400. Behind several gateway processes each has its own
buckets, so a key may send up to that many times its limits: divide them by the number of
processes. A restart fills every bucket.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields

from prometheus_client import CollectorRegistry, Counter

from cli.settings import ConfigError

PERIODS = {"minute": 60.0, "day": 86400.0}  # seconds
LIBRE_SLOWDOWN = "Slowdown:"  # how LibreTranslate's 429 for a client over its limits begins
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a key's id: safe in a metric label and a log line
HASHED_ID_CHARS = 8  # hex digits of a listed key's sha256 that name it
ROUNDING = 1e-9  # of a bucket's level


@dataclass(frozen=True)
class Limits:
    """What one key may send; 0: no limit."""

    requests_per_minute: int = 0
    requests_per_day: int = 0
    chars_per_minute: int = 0
    chars_per_day: int = 0

    def buckets(self) -> list[tuple[str, str, int, float]]:
        """(setting, what it counts, allowance, period seconds) of every limit that is set."""
        out = []
        for f in fields(self):
            allowance = getattr(self, f.name)
            if allowance:
                what, _, period = f.name.partition("_per_")
                out.append((f.name, what, allowance, PERIODS[period]))
        return out


@dataclass(frozen=True)
class ApiKey:
    id: str  # what metrics and logs name it by
    secret: str = field(repr=False)  # the key itself: never in a repr, a log line or a metric
    limits: Limits = Limits()


def hashed_id(secret: str) -> str:
    """The id of a key given without a name: a short hash, which does not give the key away."""
    return "key-" + hashlib.sha256(secret.encode()).hexdigest()[:HASHED_ID_CHARS]


def parse_keys(text: str, where: str) -> tuple[ApiKey, ...]:
    """The keys of a keys file's ``text`` (none for a file without any; ``where`` names it in
    errors); ConfigError, one line, naming the file, the entry and what is wrong."""
    first = next((line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")),
                 "")
    if first.startswith("["):
        return _toml_keys(text, where)
    listed = []
    for n, line in enumerate(text.splitlines(), 1):
        key = line.strip()
        if key and not key.startswith("#"):
            if len(key.split()) > 1:  # TOML without a table first (keys.a.key = "..."), or a typo: not a key
                raise ConfigError(f"{where}: line {n} is not a key: a key is one word (a keys file with limits "
                                  f"starts with a [keys.NAME] table)")
            listed.append(key)
    return tuple(ApiKey(hashed_id(k), k) for k in dict.fromkeys(listed))


def _toml_keys(text: str, where: str) -> tuple[ApiKey, ...]:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where} is not valid TOML: {e}") from None
    unknown = [k for k in document if k != "keys"]
    if unknown or not isinstance(document.get("keys"), dict):
        raise ConfigError(f"{where}: give one [keys.NAME] table per key (with key = \"...\" and its limits)"
                          + (f"; unknown: {', '.join(map(repr, unknown))}" if unknown else ""))
    known = ("key", *(f.name for f in fields(Limits)))
    keys, seen = [], set()
    for name, entry in document["keys"].items():
        here = f"{where}: [keys.{name}]"
        if not NAME.fullmatch(name):
            raise ConfigError(f"{here}: a key's name is 1 to 64 letters, digits, '_', '.' or '-' (it names the key "
                              f"in metrics and logs)")
        if not isinstance(entry, dict):
            raise ConfigError(f"{here}: expected a table with key = \"...\"")
        extra = [k for k in entry if k not in known]
        if extra:
            raise ConfigError(f"{here}: unknown setting {', '.join(map(repr, extra))}; known: {', '.join(known)}")
        secret = entry.get("key")
        if not isinstance(secret, str) or not secret.strip() or secret != secret.strip():
            raise ConfigError(f"{here}: key must be a string without surrounding spaces")
        if secret in seen:
            raise ConfigError(f"{here}: this key is given twice")
        seen.add(secret)
        values = {}
        for f in fields(Limits):
            value = entry.get(f.name, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (f.name in entry and not value):
                raise ConfigError(f"{here}: {f.name} must be a whole number above 0 (leave it out for no limit), "
                                  f"not {value!r}")
            values[f.name] = value
        keys.append(ApiKey(name, secret, Limits(**values)))
    return tuple(keys)


@dataclass
class Bucket:
    """A token bucket: ``allowance`` per ``period`` seconds, full at first."""

    allowance: int
    period: float
    level: float = math.nan
    at: float = math.nan

    def refill(self, now: float) -> None:
        if math.isnan(self.level):
            self.level, self.at = float(self.allowance), now
        self.level = min(float(self.allowance), self.level + (now - self.at) * self.allowance / self.period)
        self.at = now

    def wait(self, amount: int) -> float:
        """Seconds until it holds ``amount`` (0: it does now); call ``refill`` first. A shortfall of
        float rounding is none: Retry-After seconds later, the request passes."""
        short = amount - self.level
        return 0.0 if short <= ROUNDING else short * self.period / self.allowance


class Refused(Exception):
    """A request a key's limits do not let through: its HTTP status, message and Retry-After."""

    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


class Usage:
    """Per-key counters for the gateway's /metrics, labelled by the key's id."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("nmt_http_key_requests", "Requests let through, by API key id", ["key"],
                                registry=registry)
        self.characters = Counter("nmt_http_key_characters", "Characters let through (q, a file's text), by API "
                                  "key id", ["key"], registry=registry)
        self.refused = Counter("nmt_http_key_refused", "Requests refused by a key's limit, by API key id and limit",
                               ["key", "limit"], registry=registry)


class KeyRing:
    """The keys a request must carry one of (none: no key needed), and what each has left."""

    def __init__(self, keys: Sequence[ApiKey] = (), clock: Callable[[], float] = time.monotonic,
                 usage: Usage | None = None) -> None:
        self.keys, self.clock, self.usage = tuple(keys), clock, usage
        self._buckets = {k.id: [(name, what, Bucket(allowance, period))
                                for name, what, allowance, period in k.limits.buckets()] for k in self.keys}

    def __bool__(self) -> bool:
        return bool(self.keys)

    @classmethod
    def of(cls, secrets: Iterable[str], **kwargs) -> KeyRing:
        """Keys without limits, named by their hashes."""
        return cls([ApiKey(hashed_id(s), s) for s in secrets], **kwargs)

    def find(self, given: str) -> ApiKey | None:
        """The key ``given`` is, compared with every key in constant time (no timing tells how
        much of a key was right)."""
        found = None
        for k in self.keys:
            if hmac.compare_digest(given.encode(), k.secret.encode()):
                found = k
        return found

    def spend(self, key: ApiKey, chars: int) -> None:
        """Take one request and ``chars`` characters from ``key``'s buckets, or raise Refused and
        take nothing."""
        counts = {"requests": 1, "chars": chars}
        now = self.clock()
        waits = []
        for name, what, bucket in self._buckets[key.id]:
            if counts[what] > bucket.allowance:
                self._refused(key, name)
                raise Refused(400, f"Invalid request: request ({counts[what]} characters) exceeds this API key's "
                                   f"limit of {bucket.allowance} characters per {name.rpartition('_')[2]}")
            bucket.refill(now)
            if (wait := bucket.wait(counts[what])) > 0:
                waits.append((wait, name, bucket))
        if waits:
            wait, name, bucket = max(waits)
            self._refused(key, name)
            raise Refused(429, f"{LIBRE_SLOWDOWN} {bucket.allowance} {name.replace('_', ' ')} for this API key; "
                               f"retry in {math.ceil(wait)} s", max(1, math.ceil(wait)))
        for _, what, bucket in self._buckets[key.id]:
            bucket.level -= counts[what]
        if self.usage:
            self.usage.requests.labels(key.id).inc()
            self.usage.characters.labels(key.id).inc(chars)

    def _refused(self, key: ApiKey, limit: str) -> None:
        if self.usage:
            self.usage.refused.labels(key.id, limit).inc()
