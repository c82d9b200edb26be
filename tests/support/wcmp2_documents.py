"""ISO 19139 documents edited for the WCMP2 mapping's tests, and the check that a conversion of
one is valid by the mapping, WMO's schema and pywcmp's test suite."""

from __future__ import annotations

import json
from collections.abc import Callable

from jsonschema.protocols import Validator
from lxml import etree

from tests.support.wcmp2_suite import Suite, failures
from wiscat.shared.generator import generate_record
from wiscat.shared.iso19139 import GCO, GMD, GML
from wiscat.shared.wcmp2.centres import parse_rules
from wiscat.shared.wcmp2.convert import Conversion, convert
from wiscat.shared.wcmp2.validation import schema_errors

RULES = parse_rules(
    "de-dwd=prefix:urn:x-wmo:md:int.wmo.wis::;de-dwd=licence:https://www.dwd.de/terms;"
    "fr-meteofrance=originator:Météo-France;int-wmo-test=prefix:urn:x-wmo:md:int.wmo.test::"
)
OAI = "http://127.0.0.1:8080/oai"
NS = {"gmd": GMD, "gco": GCO, "gml": GML}
OAI = "http://127.0.0.1:8080/oai"
NS = {"gmd": GMD, "gco": GCO, "gml": GML}


def checker(suite: Suite, schema: Validator) -> Callable[[bytes], Conversion]:
    """Convert a document, and check it valid by the mapping, the schema and pywcmp."""

    def check(document: bytes) -> Conversion:
        conversion = convert(document, RULES, oai_base_url=OAI)
        assert conversion.invalid == (), conversion.invalid
        assert schema_errors(conversion.record, schema) == []
        assert failures(suite.run(conversion.record)) == []
        assert json.loads(conversion.content()) == conversion.record
        return conversion

    return check


def edited(edit: Callable[[etree._Element], None], n: int = 0) -> bytes:
    root = etree.fromstring(generate_record(n))
    edit(root)
    return etree.tostring(root)


def remove(root: etree._Element, path: str) -> None:
    found = root.xpath(path, namespaces=NS)
    assert found, path
    for element in found:
        element.getparent().remove(element)


def replace_text(root: etree._Element, path: str, text: str) -> None:
    found = root.xpath(path, namespaces=NS)
    assert found, path
    for element in found:
        element.text = text


def report(conversion: Conversion) -> str:
    return "\n".join(conversion.guessed + conversion.dropped + conversion.invalid)
