"""The XML namespaces of OAI-PMH 2.0 documents, named once for the reader and the renderer."""

OAI_NS = "http://www.openarchives.org/OAI/2.0/"
# lxml names an element by "{namespace}tag" (Clark notation): OAI_TAG + "record" is <record>.
OAI_TAG = "{" + OAI_NS + "}"
XSI_NS = "http://www.w3.org/2001/XMLSchema-instance"
# Identify description of a wiscat provider: "every list shows a datestamp second only once
# every record of that second is visible", so a harvester that received datestamps up to second T
# may ask ``from = T + 1 second`` next time and miss nothing (nor get the records of T again).
WISCAT_NS = "urn:wiscat:oai-pmh:1"
