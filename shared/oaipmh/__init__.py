"""OAI-PMH 2.0 itself, with no web framework or database: arguments, dates, errors, reading
and rendering."""
