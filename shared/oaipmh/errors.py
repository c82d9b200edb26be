"""OAI-PMH 2.0 error conditions (specification §3.6), one class per error code.

Exception tree::

    OAIError                      any condition the protocol names
     +-- BadArgument              badArgument
     +-- BadResumptionToken       badResumptionToken
     +-- BadVerb                  badVerb
     +-- CannotDisseminateFormat  cannotDisseminateFormat
     +-- IdDoesNotExist           idDoesNotExist
     +-- NoRecordsMatch           noRecordsMatch
     +-- NoMetadataFormats        noMetadataFormats
     +-- NoSetHierarchy           noSetHierarchy

The provider renders them as ``<error code="...">`` with HTTP 200; the harvester maps a received
code back to its class with :func:`error_for_code`.
"""

from __future__ import annotations

from typing import ClassVar


class OAIError(Exception):
    """An OAI-PMH error condition; ``code`` is the protocol's name for it."""

    code: ClassVar[str] = ""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__doc__ or self.code)
        self.message = message or (self.__doc__ or self.code).strip()

    def __reduce__(self) -> tuple[type[OAIError], tuple[str]]:
        # pickled as what it was made from (a page read in a worker process may raise one)
        return type(self), (self.message,)


class BadArgument(OAIError):
    """The request includes illegal arguments, is missing required arguments, includes a repeated
    argument, or values for arguments have an illegal syntax."""

    code = "badArgument"


class BadResumptionToken(OAIError):
    """The value of the resumptionToken argument is invalid or expired."""

    code = "badResumptionToken"


class BadVerb(OAIError):
    """Value of the verb argument is not a legal OAI-PMH verb, the verb argument is missing, or
    the verb argument is repeated."""

    code = "badVerb"


class CannotDisseminateFormat(OAIError):
    """The metadata format identified by the value given for the metadataPrefix argument is not
    supported by the item or by the repository."""

    code = "cannotDisseminateFormat"


class IdDoesNotExist(OAIError):
    """The value of the identifier argument is unknown or illegal in this repository."""

    code = "idDoesNotExist"


class NoRecordsMatch(OAIError):
    """The combination of the values of the from, until, set and metadataPrefix arguments results
    in an empty list."""

    code = "noRecordsMatch"


class NoMetadataFormats(OAIError):
    """There are no metadata formats available for the specified item."""

    code = "noMetadataFormats"


class NoSetHierarchy(OAIError):
    """The repository does not support sets."""

    code = "noSetHierarchy"


ERRORS_BY_CODE: dict[str, type[OAIError]] = {
    cls.code: cls
    for cls in (
        BadArgument,
        BadResumptionToken,
        BadVerb,
        CannotDisseminateFormat,
        IdDoesNotExist,
        NoRecordsMatch,
        NoMetadataFormats,
        NoSetHierarchy,
    )
}


def error_for_code(code: str, message: str = "") -> OAIError:
    """Build the exception for a received error ``code``; an unknown code gives a plain OAIError."""
    cls = ERRORS_BY_CODE.get(code)
    if cls is None:
        error = OAIError(f"{code}: {message}" if message else code)
        return error
    return cls(message)
