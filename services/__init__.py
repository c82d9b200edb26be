"""wiscat: a catalogue-synchronisation node for the WMO Information System (OAI-PMH 2.0).

This folder (services/) is the package itself: the provider, the harvester and the command line;
shared/ is installed as :mod:`wiscat.shared`, migrations/ as :mod:`wiscat.migrations`.
"""
