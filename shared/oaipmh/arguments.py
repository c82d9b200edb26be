"""Checking an OAI-PMH request's arguments (specification §3.1, §3.3, §3.5, §3.6 and §4).

:func:`parse_request` takes the arguments in order, repeats kept, and returns an
:class:`OAIRequest` or raises the exact error. The checks run in this order, so that one request
always gets the same error:

1. the verb: missing, repeated or unknown -> :class:`BadVerb`;
2. each other argument: unknown for the verb, repeated, or empty -> :class:`BadArgument`;
3. the exclusive ``resumptionToken`` given with anything else -> :class:`BadArgument`;
4. a required argument missing -> :class:`BadArgument`;
5. value syntax (from/until, identifier, metadataPrefix, set) and from <= until ->
   :class:`BadArgument`;
6. a metadataPrefix this repository does not offer -> :class:`CannotDisseminateFormat`.

Whether the response's ``request`` element may carry the arguments as attributes depends only on
the error: after :class:`BadVerb` or :class:`BadArgument` it carries the base URL alone (§3.2), see
:func:`echo_allowed` and :func:`error_echo`. Every other error, whether raised here
(cannotDisseminateFormat) or later by the provider (idDoesNotExist, noRecordsMatch,
badResumptionToken, ...), comes from a request whose arguments passed every syntax check, so they
can be echoed as they are.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from wiscat.shared.oaipmh.dates import Granularity, parse_datestamp
from wiscat.shared.oaipmh.errors import BadArgument, BadVerb, CannotDisseminateFormat, OAIError
from wiscat.shared.oaipmh.identifiers import any_uri_error
from wiscat.shared.text import clipped

RESUMPTION_TOKEN = "resumptionToken"  # noqa: S105 - an argument name, not a secret

# verb -> (required, optional, exclusive) arguments, from §4.1 to §4.6 of the specification.
_VERBS: dict[str, tuple[frozenset[str], frozenset[str], str | None]] = {
    "GetRecord": (frozenset({"identifier", "metadataPrefix"}), frozenset(), None),
    "Identify": (frozenset(), frozenset(), None),
    "ListIdentifiers": (
        frozenset({"metadataPrefix"}),
        frozenset({"from", "until", "set"}),
        RESUMPTION_TOKEN,
    ),
    "ListMetadataFormats": (frozenset(), frozenset({"identifier"}), None),
    "ListRecords": (
        frozenset({"metadataPrefix"}),
        frozenset({"from", "until", "set"}),
        RESUMPTION_TOKEN,
    ),
    "ListSets": (frozenset(), frozenset(), RESUMPTION_TOKEN),
}

#: The six verbs of OAI-PMH 2.0 (§4).
VERBS: tuple[str, ...] = tuple(_VERBS)

#: Every argument key the protocol defines besides ``verb`` (§3.1.1 and §4).
ARGUMENTS: frozenset[str] = frozenset(
    {"identifier", "metadataPrefix", "from", "until", "set", RESUMPTION_TOKEN}
)

# The value syntax the official schema (OAI-PMH.xsd, metadataPrefixType and setSpecType) gives
# these arguments. A value outside it has "an illegal syntax" (§3.6, badArgument), and echoing
# it in the request element would make the response itself invalid.
_NAME = r"[A-Za-z0-9\-_.!~*'()]+"
METADATA_PREFIX = re.compile(_NAME)
#: one level of a setSpec (levels are joined by ':')
SET_LEVEL = re.compile(_NAME)
SET_SPEC = re.compile(rf"{_NAME}(?::{_NAME})*")


@dataclass(frozen=True)
class OAIRequest:
    """A request whose arguments passed every check of :func:`parse_request`.

    ``from_`` and ``until`` are the inclusive bounds as given (a day value is midnight UTC of
    that day; ``until_granularity`` tells how far an inclusive ``until`` reaches, see
    :func:`wiscat.shared.oaipmh.dates.until_upper_bound`). ``echo`` holds the arguments, verb
    first, as
    the response's ``request`` element must repeat them (§3.2).
    """

    verb: str
    identifier: str | None = None
    metadata_prefix: str | None = None
    set_spec: str | None = None
    from_: datetime | None = None
    until: datetime | None = None
    until_granularity: Granularity | None = None
    resumption_token: str | None = None
    echo: dict[str, str] = field(default_factory=dict)


def echo_allowed(error: OAIError) -> bool:
    """Whether the response to a request that raised ``error`` may echo its arguments.

    §3.2: "In cases where the request that generated this response resulted in a badVerb or
    badArgument error condition, the repository must return the base URL of the protocol request
    only. Attributes must not be provided in these cases."
    """
    return not isinstance(error, BadVerb | BadArgument)


def error_echo(pairs: Sequence[tuple[str, str]], error: OAIError) -> dict[str, str] | None:
    """The attributes of the ``request`` element for a request that raised ``error`` (§3.2).

    None after badVerb or badArgument; otherwise the request's arguments, which then passed
    every syntax check of :func:`parse_request` (so none is repeated or unknown).
    """
    if not echo_allowed(error):
        return None
    return dict(pairs)


def parse_request(pairs: Sequence[tuple[str, str]], *, formats: Collection[str]) -> OAIRequest:  # noqa: C901
    """Check ``pairs`` (the request's arguments in order, repeats kept) against §3 and §4.

    Raises :class:`BadVerb` when the verb "is not a legal OAI-PMH verb, the verb argument is
    missing, or the verb argument is repeated" (§3.6). Raises :class:`BadArgument` when "the
    request includes illegal arguments, is missing required arguments, includes a repeated
    argument, or values for arguments have an illegal syntax" (§3.6): unknown or empty arguments,
    the exclusive ``resumptionToken`` with any other argument (§3.5, §4), from/until that are not
    UTC datestamps or differ in granularity (§3.3.1), from later than until (§2.7.1), or an
    identifier, metadataPrefix or set outside the schema's syntax. Raises
    :class:`CannotDisseminateFormat` for a metadataPrefix not in ``formats``, only once the
    syntax is right.
    """
    verbs = [value for key, value in pairs if key == "verb"]
    if not verbs:
        raise BadVerb("the verb argument is missing")
    if len(verbs) > 1:
        raise BadVerb("the verb argument is repeated")
    verb = verbs[0]
    if verb not in _VERBS:
        raise BadVerb(f"{verb!r} is not an OAI-PMH verb")
    required, optional, exclusive = _VERBS[verb]
    allowed = required | optional | ({exclusive} if exclusive else set())

    arguments: dict[str, str] = {}
    for key, value in pairs:
        if key == "verb":
            continue
        if key not in allowed:
            raise BadArgument(f"{key!r} is not an argument of {verb}")
        if key in arguments:
            raise BadArgument(f"the argument {key!r} is repeated")
        if value == "":
            raise BadArgument(f"the argument {key!r} is empty")
        arguments[key] = value
    echo = {"verb": verb, **arguments}

    if exclusive is not None and exclusive in arguments:
        others = sorted(set(arguments) - {exclusive})
        if others:
            raise BadArgument(
                f"{exclusive} is an exclusive argument; also given: {', '.join(others)}"
            )
        return OAIRequest(verb=verb, resumption_token=arguments[exclusive], echo=echo)
    missing = sorted(required - set(arguments))
    if missing:
        raise BadArgument(f"{verb} needs the argument(s) {', '.join(missing)}")

    from_ = until = None
    from_granularity = until_granularity = None
    if "from" in arguments:
        from_, from_granularity = parse_datestamp(arguments["from"])
    if "until" in arguments:
        until, until_granularity = parse_datestamp(arguments["until"])
    if from_granularity and until_granularity and from_granularity is not until_granularity:
        raise BadArgument("from and until must have the same granularity (§3.3.1)")
    if from_ is not None and until is not None and from_ > until:
        raise BadArgument("from is later than until (§2.7.1)")

    identifier = arguments.get("identifier")
    if identifier is not None and (problem := any_uri_error(identifier)) is not None:
        # OAI-PMH.xsd: identifierType is an xs:anyURI; an item's identifier is a URI (§2.4)
        raise BadArgument(
            f"{clipped(identifier, 80)!r} is not a legal identifier, which is a URI "
            f"(xs:anyURI): {problem}"
        )
    prefix = arguments.get("metadataPrefix")
    if prefix is not None and not METADATA_PREFIX.fullmatch(prefix):
        raise BadArgument(f"{prefix!r} is not a legal metadataPrefix")
    set_spec = arguments.get("set")
    if set_spec is not None and not SET_SPEC.fullmatch(set_spec):
        raise BadArgument(f"{set_spec!r} is not a legal setSpec")
    if prefix is not None and prefix not in formats:
        raise CannotDisseminateFormat(f"the metadata format {prefix!r} is not supported")
    return OAIRequest(
        verb=verb,
        identifier=identifier,
        metadata_prefix=prefix,
        set_spec=set_spec,
        from_=from_,
        until=until,
        until_granularity=until_granularity,
        echo=echo,
    )
