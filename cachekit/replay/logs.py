"""Reading request logs: OpenAI Batch API files, Anthropic Message Batches files, or one JSONL of
request/response records.

A line that cannot be replayed is skipped and accounted for (:class:`Skipped`), never raised
and never dropped silently: a report that quietly ignores a tenth of the log would overstate
or understate everything it says.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "FIRST_LINES_KEPT",
    "LogRecord",
    "ParsedLog",
    "Skipped",
    "field_at",
    "read_batch",
    "read_log",
    "read_message_batch",
    "read_records",
]

#: How many line numbers are kept per skip reason (the count is always complete).
FIRST_LINES_KEPT = 5

# Skip reasons, as they appear in the report.
NOT_JSON = "not_json"
MISSING_FIELD = "missing_field"
UNKNOWN_ENDPOINT = "unknown_endpoint"
OUTPUT_WITHOUT_INPUT = "output_without_input"
INPUT_WITHOUT_OUTPUT = "input_without_output"
DUPLICATE_ID = "duplicate_custom_id"
# A Message Batches request that was never processed: its result type.
CANCELED = "canceled"
EXPIRED = "expired"

#: The endpoint of every Message Batches request.
MESSAGES_URL = "/v1/messages"


@dataclass(slots=True)
class LogRecord:
    """One replayable request with the response the upstream gave it."""

    line: int  # 1-based line number in the input file
    custom_id: str
    url: str
    request: dict[str, Any]  # the request body
    response: Any  # the response body as logged (a completion, stream chunks, or an error)
    status_code: int
    latency_ms: float | None
    timestamp: float | None  # seconds since the epoch
    tenant: str | None


@dataclass
class Skipped:
    """Lines left out, by reason: a complete count and the first line numbers of each."""

    counts: dict[str, int] = field(default_factory=dict)
    first_lines: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, where: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        lines = self.first_lines.setdefault(reason, [])
        if len(lines) < FIRST_LINES_KEPT:
            lines.append(where)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass
class ParsedLog:
    records: list[LogRecord]
    skipped: Skipped
    input_format: str  # "batch", "message_batch" or "records"


class _Bad(Exception):
    """A line that cannot be replayed; ``reason`` is one of the skip reasons."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason


def field_at(obj: Any, path: str) -> Any:
    """The value at a dotted ``path`` (``metadata.tenant``) in nested dicts, or None."""
    for part in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line_number, parsed)`` for each non-blank line; a line that is not JSON yields an
    exception instance in place of the value."""
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield number, json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                yield number, _Bad(NOT_JSON, str(exc))


def _require(obj: Any, key: str, kind: type | tuple[type, ...]) -> Any:
    value = obj.get(key) if isinstance(obj, dict) else None
    if value is None or not isinstance(value, kind) or isinstance(value, bool):
        raise _Bad(MISSING_FIELD, key)
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    out = float(value)
    return out if math.isfinite(out) else None


def parse_timestamp(value: Any) -> float | None:
    """Seconds since the epoch from a number (seconds, or milliseconds when it is too large to
    be seconds) or an ISO 8601 string; None when absent or unreadable."""
    number = _number(value)
    if number is not None:
        return number / 1000.0 if number > 1e11 else number
    if isinstance(value, str) and value:
        try:
            parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=_dt.UTC)
        return parsed.timestamp()
    return None


def _tenant(tenant_field: str, *sources: Any) -> str | None:
    for source in sources:
        value = field_at(source, tenant_field)
        if value is not None:
            return str(value)
    return None


def _split_response(resp: Any) -> tuple[int, Any]:
    """``(status_code, body)`` of a logged response: either ``{"status_code", "body"}`` (the
    Batch API's shape) or the body itself (status 200)."""
    if isinstance(resp, dict) and "status_code" in resp:
        status = resp.get("status_code")
        if isinstance(status, bool) or not isinstance(status, int):
            raise _Bad(MISSING_FIELD, "response.status_code")
        return status, resp.get("body")
    return 200, resp


#: An output line's ``(status, body, latency_ms, timestamp)``, or the skip reason of a request
#: that has no answer (a canceled or expired Message Batches request).
_Answer = tuple[int, Any, float | None, float | None] | str


def _join(
    input_path: Path,
    output_path: Path,
    request_of: Callable[[Any], tuple[str, str, dict[str, Any]]],
    answer_of: Callable[[dict[str, Any]], tuple[int, Any] | str],
    *,
    endpoint_ok: Callable[[str], bool],
    tenant_field: str,
    input_format: str,
) -> ParsedLog:
    """Join a batch's input file with its output file by ``custom_id``, in input order.

    ``request_of`` reads an input line's ``(custom_id, url, body)``, ``answer_of`` an output
    line's ``(status, body)`` or the skip reason of its request; both raise :class:`_Bad`."""
    skipped = Skipped()
    answers = _answers(output_path, answer_of, skipped)
    records: list[LogRecord] = []
    seen: set[str] = set()
    for number, obj in _json_lines(input_path):
        try:
            if isinstance(obj, _Bad):
                raise obj
            cid, url, body = request_of(obj)
            if not endpoint_ok(url):
                raise _Bad(UNKNOWN_ENDPOINT, url)
            if cid in seen:
                raise _Bad(DUPLICATE_ID, cid)
            seen.add(cid)
            answer = answers.get(cid)
            if answer is None:
                raise _Bad(INPUT_WITHOUT_OUTPUT, cid)
            if isinstance(answer, str):
                raise _Bad(answer, cid)
        except _Bad as bad:
            skipped.add(bad.reason, f"{input_path.name}:{number}")
            continue
        status, resp, latency, stamp = answer
        records.append(
            LogRecord(
                line=number,
                custom_id=cid,
                url=url,
                request=body,
                response=resp,
                status_code=status,
                latency_ms=latency,
                timestamp=stamp,
                tenant=_tenant(tenant_field, obj, body),
            )
        )
    _account_orphans(output_path, answers, seen, skipped)
    return ParsedLog(records, skipped, input_format)


def _answers(
    output_path: Path,
    answer_of: Callable[[dict[str, Any]], tuple[int, Any] | str],
    skipped: Skipped,
) -> dict[str, _Answer]:
    """An output file's answers by ``custom_id``; unreadable and duplicate lines go to
    ``skipped``."""
    answers: dict[str, _Answer] = {}
    for number, obj in _json_lines(output_path):
        where = f"{output_path.name}:{number}"
        try:
            if isinstance(obj, _Bad):
                raise obj
            cid = _require(obj, "custom_id", str)
            got = answer_of(obj)
        except _Bad as bad:
            skipped.add(bad.reason, where)
            continue
        if cid in answers:
            skipped.add(DUPLICATE_ID, where)
        elif isinstance(got, str):
            answers[cid] = got
        else:
            latency, stamp = _number(obj.get("latency_ms")), parse_timestamp(obj.get("timestamp"))
            answers[cid] = (got[0], got[1], latency, stamp)
    return answers


def _batch_request(obj: Any) -> tuple[str, str, dict[str, Any]]:
    return _require(obj, "custom_id", str), _require(obj, "url", str), _require(obj, "body", dict)


def _batch_answer(obj: dict[str, Any]) -> tuple[int, Any]:
    status, body = _split_response(_require(obj, "response", dict))
    if body is None:
        raise _Bad(MISSING_FIELD, "response.body")
    return status, body


def read_batch(
    input_path: Path,
    output_path: Path,
    *,
    endpoint_ok: Callable[[str], bool],
    tenant_field: str = "metadata.tenant",
) -> ParsedLog:
    """Join an OpenAI Batch API input file with its output file by ``custom_id``.

    Records come out in input order (the order requests were submitted in)."""
    return _join(
        input_path,
        output_path,
        _batch_request,
        _batch_answer,
        endpoint_ok=endpoint_ok,
        tenant_field=tenant_field,
        input_format="batch",
    )


def _message_request(obj: Any) -> tuple[str, str, dict[str, Any]]:
    return _require(obj, "custom_id", str), MESSAGES_URL, _require(obj, "params", dict)


def _message_answer(obj: dict[str, Any]) -> tuple[int, Any] | str:
    result = _require(obj, "result", dict)
    kind = result.get("type")
    if kind == "succeeded":
        return 200, _require(result, "message", dict)
    if kind == "errored":
        error = _require(result, "error", dict)
        invalid = field_at(error, "error.type") == "invalid_request_error"
        return (400 if invalid else 500), error
    if kind in (CANCELED, EXPIRED):
        return kind
    raise _Bad(MISSING_FIELD, "result.type")


def read_message_batch(
    requests_path: Path,
    results_path: Path,
    *,
    endpoint_ok: Callable[[str], bool],
    tenant_field: str = "metadata.tenant",
) -> ParsedLog:
    """Join an Anthropic Message Batches requests file (``{"custom_id", "params"}`` lines: what
    ``messages.batches.create`` was given) with its results file (``{"custom_id", "result"}``
    lines: what ``messages.batches.results`` streams) by ``custom_id``, in request order.

    Every request is a ``/v1/messages`` call with ``params`` as its body. A ``succeeded``
    result gives its Message with status 200; an ``errored`` one its error body
    (``{"type": "error", "error": {"type", "message"}}``) with status 400 for an
    ``invalid_request_error`` and 500 for any other error; a ``canceled`` or ``expired``
    request, never processed, is skipped under that reason at its line of the requests file."""
    return _join(
        requests_path,
        results_path,
        _message_request,
        _message_answer,
        endpoint_ok=endpoint_ok,
        tenant_field=tenant_field,
        input_format="message_batch",
    )


def _account_orphans(
    output_path: Path, responses: dict[str, Any], seen: set[str], skipped: Skipped
) -> None:
    orphans = [cid for cid in responses if cid not in seen]
    if not orphans:
        return
    # Output line numbers of orphans are not kept through the join; a second cheap pass finds
    # them, only when there are any.
    wanted = set(orphans)
    for number, obj in _json_lines(output_path):
        if isinstance(obj, dict) and obj.get("custom_id") in wanted:
            skipped.add(OUTPUT_WITHOUT_INPUT, f"{output_path.name}:{number}")
            wanted.discard(obj["custom_id"])


def _record(
    number: int,
    obj: Any,
    *,
    endpoint_ok: Callable[[str], bool],
    default_url: str,
    tenant_field: str,
) -> LogRecord:
    if isinstance(obj, _Bad):
        raise obj
    request = _require(obj, "request", dict)
    url = default_url
    body = request
    # The request may be logged as the body alone or wrapped Batch-style with url/body.
    if isinstance(request.get("body"), dict):
        body = request["body"]
        url = request.get("url") if isinstance(request.get("url"), str) else default_url
    url = obj.get("url") if isinstance(obj.get("url"), str) else url
    if not endpoint_ok(url):
        raise _Bad(UNKNOWN_ENDPOINT, url)
    if "response" not in obj or obj["response"] is None:
        raise _Bad(MISSING_FIELD, "response")
    status, resp = _split_response(obj["response"])
    if resp is None:
        raise _Bad(MISSING_FIELD, "response.body")
    cid = obj.get("custom_id") or obj.get("id")
    return LogRecord(
        line=number,
        custom_id=str(cid) if cid is not None else f"line-{number}",
        url=url,
        request=body,
        response=resp,
        status_code=status,
        latency_ms=_number(obj.get("latency_ms")),
        timestamp=parse_timestamp(obj.get("timestamp")),
        tenant=_tenant(tenant_field, obj, request, body),
    )


def read_records(
    path: Path,
    *,
    endpoint_ok: Callable[[str], bool],
    default_url: str = "/v1/chat/completions",
    tenant_field: str = "metadata.tenant",
) -> ParsedLog:
    """Read one JSONL of ``{"request", "response", "latency_ms", "timestamp"}`` records."""
    skipped = Skipped()
    records: list[LogRecord] = []
    seen: set[str] = set()
    for number, obj in _json_lines(path):
        try:
            rec = _record(
                number,
                obj,
                endpoint_ok=endpoint_ok,
                default_url=default_url,
                tenant_field=tenant_field,
            )
            if rec.custom_id in seen:
                raise _Bad(DUPLICATE_ID, rec.custom_id)
        except _Bad as bad:
            skipped.add(bad.reason, f"{path.name}:{number}")
            continue
        seen.add(rec.custom_id)
        records.append(rec)
    return ParsedLog(records, skipped, "records")


def _first_has(path: Path, key: str, *, lacks: str) -> bool:
    """Whether the first object of ``path`` has ``custom_id`` and ``key`` but not ``lacks``."""
    for _, obj in _json_lines(path):
        if isinstance(obj, dict):
            return "custom_id" in obj and key in obj and lacks not in obj
    return False


class _Batch(NamedTuple):
    """One API's pair of batch files: how to tell them apart and how to read them."""

    name: str  # as the messages call it
    input_key: str  # what an input line holds besides custom_id (a records line has "request")
    output_key: str  # what an output line holds besides custom_id
    files: tuple[str, str]  # what the input and the output file are called
    read: Callable[..., ParsedLog]

    def is_input(self, path: Path) -> bool:
        return _first_has(path, self.input_key, lacks="request")

    def is_output(self, path: Path) -> bool:
        return _first_has(path, self.output_key, lacks=self.input_key)


_BATCHES = (
    _Batch("an OpenAI Batch API", "body", "response", ("input", "output"), read_batch),
    _Batch(
        "an Anthropic Message Batches",
        "params",
        "result",
        ("requests", "results"),
        read_message_batch,
    ),
)


def read_log(
    input_path: str | Path,
    outputs_path: str | Path | None = None,
    *,
    endpoint_ok: Callable[[str], bool],
    tenant_field: str = "metadata.tenant",
) -> ParsedLog:
    """Read any format: a batch's input file with ``outputs_path`` (OpenAI Batch API or
    Anthropic Message Batches, told apart by their lines), or a records file.

    Usage errors are reported as such rather than as thousands of skipped lines: a batch
    input given without its output file (its responses are in the other file), the two files
    swapped, and a log with no request that can be replayed (ValueError)."""
    inp = Path(input_path)
    if outputs_path is not None:
        out = Path(outputs_path)
        for batch in _BATCHES:
            if batch.is_output(inp) and batch.is_input(out):
                raise ValueError(
                    f"{inp} is {batch.name} {batch.files[1]} file and {out} its "
                    f"{batch.files[0]} file: swap them (cachekit replay {out} --outputs {inp})"
                )
        # Told by the input file, else by the output file; OpenAI's when neither says.
        by_input = [b for b in _BATCHES if b.is_input(inp)]
        batch = (by_input or [b for b in _BATCHES if b.is_output(out)] or [_BATCHES[0]])[0]
        parsed = batch.read(inp, out, endpoint_ok=endpoint_ok, tenant_field=tenant_field)
    else:
        for batch in _BATCHES:
            if batch.is_input(inp):
                given, wanted = batch.files
                raise ValueError(
                    f"{inp} looks like {batch.name} {given} file: pass its {wanted} file "
                    f"with --outputs {wanted.upper()}.jsonl"
                )
        parsed = read_records(inp, endpoint_ok=endpoint_ok, tenant_field=tenant_field)
    if not parsed.records:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(parsed.skipped.counts.items()))
        raise ValueError(
            f"no request in {inp} can be replayed"
            + (f" ({parsed.skipped.total} lines skipped: {reasons})" if reasons else " (empty)")
            + "; see docs/replay.md for the formats it reads"
        )
    return parsed


def iter_texts(
    records: Iterable[LogRecord], text_of: Callable[[LogRecord], str | None]
) -> list[str]:
    """The distinct non-empty texts of ``records`` in first-seen order."""
    seen: dict[str, None] = {}
    for rec in records:
        text = text_of(rec)
        if text:
            seen.setdefault(text, None)
    return list(seen)
