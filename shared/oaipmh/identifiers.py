"""Which text can be an OAI-PMH identifier: an ``xs:anyURI`` as schema validators read it.

OAI-PMH.xsd types every item identifier (a header's ``identifier``, the ``identifier`` argument
echoed in the ``request`` element) as ``identifierType``, a restriction of ``xs:anyURI`` (§2.4:
"identifiers must follow the URI syntax"). One record whose identifier is not one makes every
answer that carries it invalid against the schema, for every harvester that validates.

:func:`any_uri_error` says whether text is such a URI, and if not what is wrong. The rule is RFC
3986's URI-reference, with the leniencies XML Schema 1.0 gives ``xs:anyURI`` (§3.2.17: the
characters XLink §5.4 escapes before a URI is read count as escaped) and one that libxml2, the
validator of lxml and xmllint, adds:

- the value is whitespace-collapsed first (the type's ``whiteSpace`` is ``collapse``);
- a space, a non-ASCII character, a control character XML allows (tab, LF, CR) and each of
  ``<>"{}|\\^`'`` stands for its %-escape, so it is taken wherever an unreserved character is;
- ``[`` and ``]`` are taken in the fragment (libxml2's uri.c, for XPointer fragments).

So ``a[1]``, ``a#b#c``, ``a%zz``, ``1a:b`` and ``http://host:port/`` are refused, and ``a b``
and ``é`` are not. It is stricter than libxml2 in two places, where RFC 3986 or Python's URL
parsing (which the ``xmlschema`` package's anyURI datatype uses) refuse what libxml2 lets
through: a host in brackets must be an IPv6 address or an IPvFuture (libxml2 takes any text
there), and a port is at most 65535 (libxml2 takes up to 2**31 - 1). Everything else it
accepts, libxml2 accepts.
"""

from __future__ import annotations

import ipaddress
import re

from wiscat.shared.text import clipped

# RFC 3986 §3.1: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+\-.]*")
_SCHEME_RULE = "a letter, then letters, digits, '+', '-' or '.'"
# RFC 3986 Appendix B: splits any text into scheme, authority, path, query and fragment. What
# each part holds is then checked on its own.
_PARTS = re.compile(r"(?:([^:/?#]+):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?", re.S)
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
# The characters XLink §5.4 escapes (XML Schema 1.0 §3.2.17), as libxml2's xmlschemastypes.c
# lists them: the XML whitespace a collapse leaves (as spaces), these, and all that is not ASCII.
_ESCAPED_BY_XLINK = re.compile("[\t\n\r <>\"{}|\\\\^`'\x7f-\U0010ffff]")
# What XML 1.0 (§2.2) cannot carry at all: no document can hold an identifier with one.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

# RFC 3986 §2: unreserved and sub-delims; "%" for a pct-encoded octet, all of which are known
# to be whole by then; "_" also stands for every character that counts as escaped.
_UNRESERVED = r"A-Za-z0-9\-._~%"
_SUB_DELIMS = r"!$&'()*+,;="
_USERINFO = re.compile(rf"[{_UNRESERVED}{_SUB_DELIMS}:]*")
_REG_NAME = re.compile(rf"[{_UNRESERVED}{_SUB_DELIMS}]*")
_IP_FUTURE = re.compile(rf"v[0-9A-Fa-f]+\.[{_UNRESERVED}{_SUB_DELIMS}:]+")
_ZONE = re.compile(rf"[{_UNRESERVED}]+")
_PORT = re.compile(r"[0-9]+")
_MAX_PORT = 65535
_BRACKETS = "'[' or ']' outside the fragment and a host in brackets"


# The usual identifier (a URN, a path of plain characters): a scheme, and a path with no
# authority, escape, query or fragment. It is valid as it stands; one match settles it, where the
# whole check costs ten times more on the harvester's every record.
_PLAIN = re.compile(rf"[A-Za-z][A-Za-z0-9+\-.]*:(?!//)[A-Za-z0-9\-._~{_SUB_DELIMS}:@/]*")


def any_uri_error(text: str) -> str | None:
    """None if ``text`` is an ``xs:anyURI`` as schema validators read it (the module's docstring
    gives the rule); otherwise what is wrong with it, in a few words, such as "more than one
    '#'". Pure: no lookup, no network."""
    if _PLAIN.fullmatch(text):
        return None
    bad = _NOT_XML.search(text)
    if bad is not None:
        return f"it holds U+{ord(bad.group()):04X}, which no XML document can carry"
    if _BAD_ESCAPE.search(text):
        return "a '%' not followed by two hexadecimal digits"
    if text.count("#") > 1:
        return "more than one '#'"
    shown = text.strip("\t\n\r ")
    # What the validators parse: the same length as ``shown``, so that a part's span in one is
    # its span in the other (and the error quotes the text as given).
    read = _ESCAPED_BY_XLINK.sub("_", shown)
    parts = _PARTS.fullmatch(read)
    assert parts is not None  # Appendix B's expression matches any text
    scheme, authority, path, query, _ = parts.groups()
    if scheme is not None and not _SCHEME.fullmatch(scheme):
        quoted = clipped(shown[: parts.end(1)], 40)
        return f"{quoted!r} before the first ':' is no URI scheme ({_SCHEME_RULE})"
    if read.startswith(":"):
        # Appendix B takes any other first segment with a ":" as a scheme; a relative
        # reference's first segment holds no ":" (RFC 3986 §4.2)
        return f"nothing before the first ':', where a URI scheme must be ({_SCHEME_RULE})"
    if authority is not None:
        problem = _authority_error(authority, clipped(shown[parts.start(2) : parts.end(2)], 60))
        if problem is not None:
            return problem
    if "[" in path or "]" in path or "[" in (query or "") or "]" in (query or ""):
        return _BRACKETS
    # Nothing else can be wrong: once the characters above count as escaped, the path, query
    # and fragment can hold no other character RFC 3986 refuses them ("?" and "#" end a part,
    # a second "#" and a broken %-escape are refused above, the fragment takes brackets).
    return None


def _authority_error(authority: str, shown: str) -> str | None:
    # RFC 3986 §3.2: authority = [ userinfo "@" ] host [ ":" port ]
    userinfo, at, hostport = authority.partition("@")
    if not at:
        hostport = authority
    elif not _USERINFO.fullmatch(userinfo):
        return _BRACKETS if "[" in userinfo or "]" in userinfo else _not_an_authority(shown)
    if hostport.startswith("["):
        literal, closed, rest = hostport[1:].partition("]")
        if not closed:
            return f"the authority {shown!r} opens a '[' it does not close"
        if not (_IP_FUTURE.fullmatch(literal) or _is_ipv6(literal)):
            return (
                f"the authority {shown!r} has a host in brackets that is neither an IPv6 "
                "address nor an IPvFuture (RFC 3986 §3.2.2)"
            )
        if rest and not rest.startswith(":"):
            return _not_an_authority(shown)
        colon, port = bool(rest), rest[1:]
    else:
        host, colon_text, port = hostport.partition(":")
        colon = bool(colon_text)
        if "[" in host or "]" in host:
            return _BRACKETS
        if not _REG_NAME.fullmatch(host):
            return _not_an_authority(shown)
    if colon and not (_PORT.fullmatch(port) and int(port) <= _MAX_PORT):
        return f"the authority {shown!r} has a port that is not a number from 0 to {_MAX_PORT}"
    return None


def _not_an_authority(shown: str) -> str:
    return f"the authority {shown!r} is not [user@]host[:port]"


def _is_ipv6(text: str) -> bool:
    # RFC 6874: an IPv6 address may name its zone after "%25"
    address, zone_mark, zone = text.partition("%25")
    if (zone_mark and not _ZONE.fullmatch(zone)) or "%" in address or "_" in address:
        return False  # "_": an escaped character stands there, which no address holds
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return False
    return True
