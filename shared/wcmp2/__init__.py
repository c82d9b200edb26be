"""WIS 2.0 discovery metadata: a WCMP 1.3 (ISO 19139) record as a WCMP2 2.3.0 record.

:mod:`.identifiers` maps a fileIdentifier to a WCMP2 id and back; :mod:`.centres` reads the
operator's WIS2 centre rules (``WISCAT_WIS2_CENTRES``) and picks a record's centre-id;
:mod:`.reading` takes values out of the ISO tree; :mod:`.parts` maps contacts, time, geometry,
themes, data policy and links; :mod:`.convert` assembles the record and its conversion report;
:mod:`.validation` checks a record against the WCMP2 schema and the test suite's rules.
docs/wis2.md has the mapping table.
"""
