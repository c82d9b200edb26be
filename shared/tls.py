"""TLS of the node's outbound https requests: to peers, and to registry nodes.

A peer's certificate is checked against the system's trusted certificates and, where the
operator names them, the certificates of ``WISCAT_CA_FILE`` besides (a private CA of a closed
network). A certificate or a handshake that fails is no passing fault: :func:`refusal` says why
in one line, and the caller gives up at once instead of retrying.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # settings read this module, and a command need not load an HTTP client
    import aiohttp

# "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)" -> "wrong version number"
_OPENSSL_NOISE = re.compile(r"^\[[A-Z0-9_]+: [A-Z0-9_]+\] | \(_ssl\.c:\d+\)$")


# OpenSSL's verify codes for a certificate whose issuer is not among those trusted (rather than
# one expired, or made out to another name): X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT,
# DEPTH_ZERO_SELF_SIGNED_CERT, SELF_SIGNED_CERT_IN_CHAIN, UNABLE_TO_GET_ISSUER_CERT_LOCALLY,
# UNABLE_TO_VERIFY_LEAF_SIGNATURE
_UNKNOWN_ISSUER = {2, 18, 19, 20, 21}


def client_context(ca_file: Path | None) -> ssl.SSLContext:
    """What an outbound https connection trusts: the system's certificates, and ``ca_file``'s.

    Raises OSError (``ssl.SSLError`` among them) for a file that cannot be read or holds no
    certificate."""
    context = ssl.create_default_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=ca_file)
    return context


def message(error: BaseException) -> str:
    """An OpenSSL error's message without its codes: ``no certificate or crl found``."""
    return _OPENSSL_NOISE.sub("", getattr(error, "strerror", None) or str(error))


def refusal(exc: aiohttp.ClientSSLError) -> str:
    """Why a TLS connection failed, in one line, with what the operator can do about it."""
    where = f"{exc.host}:{exc.port}"
    error = getattr(exc, "certificate_error", None)  # aiohttp.ClientConnectorCertificateError
    if error is not None:
        why = getattr(error, "verify_message", None) or message(error)
        if getattr(error, "verify_code", None) in _UNKNOWN_ISSUER:
            why += " (a private CA's certificates can be trusted with WISCAT_CA_FILE)"
        return f"the TLS certificate of {where} is not trusted: {why}"
    error = exc.os_error
    why = message(error)
    if getattr(error, "reason", None) == "WRONG_VERSION_NUMBER":
        why += " (the port does not speak TLS: http, not https?)"
    return f"the TLS handshake with {where} failed: {why}"
