"""The operator's dashboard at ``/``: one server-rendered page, no external asset.

First a status strip (the node, its database, whether its harvester answers, the links that fail
or lag, the latest consistency check); then its links (last run, outcome, lag, counts, last error,
and a "harvest now" button that calls the admin API with the admin token the operator types in);
then three plots: harvest duration and lag per link over time, records arriving per day; then the
catalogue (records per set), recent harvest runs, quarantined records (each viewable on a page of
its own, ``/quarantine/ID``), the latest consistency reports and the registry (its network, chain,
peers and URLs). The page reloads itself every :data:`~wiscat.provider.dashboard.routes.REFRESH`
seconds. It must read on a laptop screen (1366 pixels wide) without scrolling sideways, hence few,
wrapping columns, and in an 800-pixel window, where the links table's times, counts and addresses
wrap too.

The modules, each standing on the ones after it:

- ``routes``: the two pages' handlers, which load a view and render it;
- ``pages``: the pages and their sections, rendered from a view;
- ``view``: the view model, rows from the database turned into plain data;
- ``probe``: whether the harvester answers, seen from this provider;
- ``markup``: the style sheet, the script, the headers and the table cells;
- ``plots``: the plots, inline SVG.
"""
